package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// alive reports whether pid runs, a zombie not counted
// (controlplane.Runs).
func alive(pid int) bool { return controlplane.Runs(pid) }

func running(dir string) bool {
	pids, err := readPIDs(dir)
	if err != nil {
		return false
	}
	for pid := range pids {
		if alive(pid) {
			return true
		}
	}
	return false
}

// down stops the demo's processes by PID: SIGTERM to each process group,
// SIGKILL to what is left after 10 seconds.
func down(dir string) error {
	pids, err := readPIDs(dir)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Println("no demo cluster is running")
		return nil
	}
	if err != nil {
		return err
	}
	// Its containers first, through containerd, while it runs.
	if err := stopRealNode(dir); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-demo:", err)
	}
	for pid, name := range pids {
		if alive(pid) {
			fmt.Printf("stopping %s (pid %d)\n", name, pid)
			_ = syscall.Kill(-pid, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(pid) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	// Gone before down returns: the next demo may start at once.
	deadline = time.Now().Add(10 * time.Second)
	for pid, name := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(pid) {
			fmt.Fprintf(os.Stderr, "gpushare-demo: %s (pid %d) survived SIGKILL\n", name, pid)
		}
	}
	return os.Remove(dir + "/" + pidFile)
}
