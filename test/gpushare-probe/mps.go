package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// mpsControl stands in for nvidia-cuda-mps-control on the real node,
// which has no NVIDIA driver, when the binary runs under that name: "-f"
// runs the "daemon" in the foreground, with its control file in the pipe
// directory and a marker in its /dev/shm (which MPS clients must share);
// without it, it answers one command read from stdin as the control
// client does: get_server_list while the daemon runs, and quit. It is
// gpu-check's fake-mps-control.sh in Go: the node daemon's image has no
// shell.
func mpsControl(args []string) int {
	pipe, logDir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	if pipe == "" || logDir == "" {
		fmt.Fprintln(os.Stderr, "nvidia-cuda-mps-control (stand-in): CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY must be set")
		return 2
	}
	pidFile, quit := filepath.Join(pipe, "control.pid"), filepath.Join(pipe, "quit")
	if len(args) > 0 && args[0] == "-f" {
		pid := strconv.Itoa(os.Getpid())
		marker := "/dev/shm/gpushare-mps-standin-" + pid
		for _, f := range []struct{ path, content string }{
			{pidFile, pid + "\n"}, {filepath.Join(pipe, "control"), ""}, {marker, pipe + "\n"},
		} {
			if err := os.WriteFile(f.path, []byte(f.content), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		appendLog(logDir, "started "+pid)
		for {
			if _, err := os.Stat(quit); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, f := range []string{quit, filepath.Join(pipe, "control"), pidFile, marker} {
			_ = os.Remove(f)
		}
		appendLog(logDir, "quit "+pid)
		return 0
	}
	b, err := os.ReadFile(pidFile)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil || syscall.Kill(pid, 0) != nil {
		fmt.Fprintf(os.Stderr, "no MPS control daemon at %s\n", pipe)
		return 1
	}
	cmd, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	switch strings.TrimSpace(cmd) {
	case "get_server_list":
		return 0
	case "quit":
		if err := os.WriteFile(quit, nil, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown command: %s\n", strings.TrimSpace(cmd))
	return 1
}

func appendLog(dir, line string) {
	f, err := os.OpenFile(filepath.Join(dir, "control.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	_, _ = fmt.Fprintln(f, line)
	_ = f.Close()
}
