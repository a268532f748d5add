package mps

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// shimName is the name the daemon's binary runs under when it re-executes
// itself to start the control daemon with ShmDir as /dev/shm.
const shimName = "gpushare-mps-shm"

// daemonCommand is the control daemon in the foreground: run directly, or
// with ShmDir set, through the binary itself in a new mount namespace
// (Go makes its mounts private), where Shim binds ShmDir over /dev/shm
// and then executes the control daemon in its place.
func (d *Daemon) daemonCommand() *exec.Cmd {
	if d.ShmDir == "" {
		return exec.Command(d.Control, "-f") //nolint:gosec // the configured MPS control binary
	}
	c := exec.Command("/proc/self/exe", d.ShmDir, d.Control, "-f") //nolint:gosec // this binary, re-executed
	c.Args[0] = shimName
	c.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	return c
}

// Shim returns at once unless this process is the re-executed helper of
// a Daemon with ShmDir; then it binds ShmDir over /dev/shm, executes the
// control daemon in its place, and never returns. Binaries that run such
// a Daemon call it first in main (tests, in TestMain).
func Shim() {
	if filepath.Base(os.Args[0]) != shimName {
		return
	}
	if len(os.Args) < 3 {
		fmt.Fprintf(os.Stderr, "%s: want a directory and a command, got %q\n", shimName, os.Args[1:])
		os.Exit(2)
	}
	shm, argv := os.Args[1], os.Args[2:]
	if err := syscall.Mount(shm, "/dev/shm", "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		fmt.Fprintf(os.Stderr, "%s: binding %s over /dev/shm (needs CAP_SYS_ADMIN): %v\n", shimName, shm, err)
		os.Exit(126)
	}
	path, err := exec.LookPath(argv[0])
	if err == nil {
		err = syscall.Exec(path, argv, os.Environ()) //nolint:gosec // the configured MPS control binary
	}
	fmt.Fprintf(os.Stderr, "%s: running %s: %v\n", shimName, argv[0], err)
	os.Exit(127)
}
