// Package scripts tests the project's shell scripts under hack/ that
// make runs, with stand-ins for the commands they call.
package scripts

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stubMake stands in for make: "lint" prints its CPU priority, writes
// its PID to $PIDFILE, sleeps $LINT_SLEEP seconds and exits $LINT_RC;
// any other targets, once lint has written its PID if $AFTER_LINT is
// set (exit 9 if it does not within a minute), print their names and
// exit $TARGETS_RC after $TARGETS_SLEEP seconds.
const stubMake = `#!/bin/sh
[ "$1" = --no-print-directory ] && shift
if [ "$1" = lint ]; then
	echo "$$" > "$PIDFILE"
	echo "lint at nice $(nice)"
	sleep "${LINT_SLEEP:-0}"
	exit "${LINT_RC:-0}"
fi
if [ -n "$AFTER_LINT" ]; then
	i=0
	while [ ! -s "$PIDFILE" ]; do
		i=$((i+1))
		if [ $i -gt 600 ]; then echo "lint did not start beside the targets"; exit 9; fi
		sleep 0.1
	done
fi
echo "targets: $*"
sleep "${TARGETS_SLEEP:-0}"
exit "${TARGETS_RC:-0}"
`

func beside(t *testing.T, env ...string) (string, string, error) {
	t.Helper()
	cmd, out, pidFile := besideCmd(t, env...)
	err := cmd.Start()
	if err == nil {
		err = waitFor(t, cmd, 2*time.Minute)
	}
	pid, _ := os.ReadFile(pidFile)
	return out.String(), strings.TrimSpace(string(pid)), err
}

// besideCmd is the script with the stand-in make, its output and the
// file lint writes its PID to.
func besideCmd(t *testing.T, env ...string) (*exec.Cmd, *output, string) {
	t.Helper()
	dir := t.TempDir()
	stub := filepath.Join(dir, "make")
	if err := os.WriteFile(stub, []byte(stubMake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("../../hack/test-beside.sh", "unit", "integration")
	// The script's jobs are process groups of their own: stopped with it
	// if it is killed for taking too long.
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(dir, "lint.pid")); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(-n, syscall.SIGKILL)
			}
		}
	})
	cmd.Env = append(os.Environ(), append([]string{"MAKE=" + stub, "PIDFILE=" + filepath.Join(dir, "lint.pid"), "TMPDIR=" + dir}, env...)...)
	out := &output{}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out, filepath.Join(dir, "lint.pid")
}

// output is the script's output, read while it runs.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// TestLintBesideTargets: lint runs beside the targets (they wait for it
// to start) at nice 19, and its output comes after theirs; both pass,
// so the script does.
func TestLintBesideTargets(t *testing.T) {
	out, _, err := beside(t, "LINT_SLEEP=1", "AFTER_LINT=1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	targets, lint := strings.Index(out, "targets: unit integration"), strings.Index(out, "lint at nice 19")
	if targets < 0 || lint < 0 || lint < targets {
		t.Errorf("want the targets' output, then lint's at nice 19; got:\n%s", out)
	}
}

// TestLintFailureFails: the targets pass, lint fails: the script fails
// with lint's status and says so.
func TestLintFailureFails(t *testing.T) {
	out, _, err := beside(t, "LINT_RC=3")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("exit %v; want lint's status 3\n%s", err, out)
	}
	if !strings.Contains(out, "lint failed (exit status 3)") {
		t.Errorf("no word of lint's failure:\n%s", out)
	}
}

// TestTargetsFailureStopsLint: a target fails while lint still runs:
// the script fails at once with the target's status, and lint, with
// what it started, is stopped.
func TestTargetsFailureStopsLint(t *testing.T) {
	start := time.Now()
	out, pid, err := beside(t, "TARGETS_RC=2", "LINT_SLEEP=60", "AFTER_LINT=1")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit %v; want the targets' status 2\n%s", err, out)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the script took %v: it waited for lint", d)
	}
	stopped(t, pid, out)
}

// TestStoppedStopsLint: make test stopped (SIGTERM, as CI's timeout
// sends, or SIGINT): the script stops lint before it exits.
func TestStoppedStopsLint(t *testing.T) {
	// A signal this process ignores, as one started in the background
	// by a non-interactive shell ignores SIGINT, its children would
	// ignore too: handled here, they get the default.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT)
	defer signal.Stop(sigs)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd, out, pidFile := besideCmd(t, "TARGETS_SLEEP=60", "LINT_SLEEP=60", "AFTER_LINT=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(out.String(), "targets:") {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				t.Fatalf("the targets did not start:\n%s", out)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(t, cmd, 30*time.Second); err == nil {
			t.Errorf("%v: the script exited 0", sig)
		}
		pid, _ := os.ReadFile(pidFile)
		stopped(t, strings.TrimSpace(string(pid)), out.String())
	}
}

// waitFor waits for the script to end, d at most: then it fails t.
func waitFor(t *testing.T, cmd *exec.Cmd, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		t.Fatalf("the script still runs %v later (killed: %v)", d, <-done)
		return nil
	}
}

// stopped fails t unless lint's process group (lint's PID) is gone: the
// stand-in and the sleep it started.
func stopped(t *testing.T, pid, out string) {
	t.Helper()
	n, err := strconv.Atoi(pid)
	if err != nil {
		t.Fatalf("lint's PID %q: %v (did it start?)\n%s", pid, err, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !errors.Is(syscall.Kill(-n, 0), syscall.ESRCH) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-n, syscall.SIGKILL)
			t.Fatalf("lint's process group %d still runs after the script ended", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
