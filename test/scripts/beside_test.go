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

// stubMake stands in for make: run with -k (the checks beside the
// tests) it prints its CPU priority and targets, writes its PID to
// $PIDFILE, sleeps $BESIDE_SLEEP seconds and exits $BESIDE_RC; run
// without (the tests), once the checks have written their PID if
// $AFTER_BESIDE is set (exit 9 if they do not within a minute), it prints
// its targets and exits $TARGETS_RC after $TARGETS_SLEEP seconds.
const stubMake = `#!/bin/sh
[ "$1" = --no-print-directory ] && shift
if [ "$1" = -k ]; then
	shift
	echo "$$" > "$PIDFILE"
	echo "beside at nice $(nice): $*"
	sleep "${BESIDE_SLEEP:-0}"
	exit "${BESIDE_RC:-0}"
fi
if [ -n "$AFTER_BESIDE" ]; then
	i=0
	while [ ! -s "$PIDFILE" ]; do
		i=$((i+1))
		if [ $i -gt 600 ]; then echo "the checks did not start beside the targets"; exit 9; fi
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

// besideCmd is the script with the stand-in make, lint and fuzzing (with
// a variable) beside unit and integration, its output and the file the
// checks beside write their PID to.
func besideCmd(t *testing.T, env ...string) (*exec.Cmd, *output, string) {
	t.Helper()
	dir := t.TempDir()
	stub := filepath.Join(dir, "make")
	if err := os.WriteFile(stub, []byte(stubMake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("../../hack/test-beside.sh", "lint", "fuzz", "FUZZTIME=inputs", "--", "unit", "integration")
	// The script's jobs are process groups of their own: stopped with it
	// if it is killed for taking too long.
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(dir, "beside.pid")); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(-n, syscall.SIGKILL)
			}
		}
	})
	cmd.Env = append(os.Environ(), append([]string{"MAKE=" + stub, "PIDFILE=" + filepath.Join(dir, "beside.pid"), "TMPDIR=" + dir}, env...)...)
	out := &output{}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out, filepath.Join(dir, "beside.pid")
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

// TestChecksBesideTargets: the checks (lint, and fuzzing with its
// variable) run beside the targets (they wait for them to start) as one
// make -k at nice 19, and their output comes after the targets'; both
// pass, so the script does.
func TestChecksBesideTargets(t *testing.T) {
	out, _, err := beside(t, "BESIDE_SLEEP=1", "AFTER_BESIDE=1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	targets, checks := strings.Index(out, "targets: unit integration"), strings.Index(out, "beside at nice 19: lint fuzz FUZZTIME=inputs")
	if targets < 0 || checks < 0 || checks < targets {
		t.Errorf("want the targets' output, then the checks' at nice 19; got:\n%s", out)
	}
}

// TestUsage: without both lists the script says how to call it and runs
// nothing.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"lint", "unit"}, {"--", "unit"}, {"lint", "--"}} {
		cmd := exec.Command("../../hack/test-beside.sh", args...)
		cmd.Env = append(os.Environ(), "MAKE=false")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "usage:") {
			t.Errorf("%q: exit %v, output %q; want 2 and the usage", args, err, out)
		}
	}
}

// TestChecksFailureFails: the targets pass, a check beside them fails:
// the script fails with the checks' status and says so.
func TestChecksFailureFails(t *testing.T) {
	out, _, err := beside(t, "BESIDE_RC=3")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("exit %v; want the checks' status 3\n%s", err, out)
	}
	if !strings.Contains(out, "a check beside the tests failed (make exited 3)") {
		t.Errorf("no word of the checks' failure:\n%s", out)
	}
}

// TestTargetsFailureStopsChecks: a target fails while the checks beside
// still run: the script fails at once with the target's status, and the
// checks, with what they started, are stopped.
func TestTargetsFailureStopsChecks(t *testing.T) {
	start := time.Now()
	out, pid, err := beside(t, "TARGETS_RC=2", "BESIDE_SLEEP=60", "AFTER_BESIDE=1")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit %v; want the targets' status 2\n%s", err, out)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the script took %v: it waited for the checks", d)
	}
	stopped(t, pid, out)
}

// TestStoppedStopsChecks: make test stopped (SIGTERM, as CI's timeout
// sends, or SIGINT): the script stops the checks beside before it exits.
func TestStoppedStopsChecks(t *testing.T) {
	// A signal this process ignores, as one started in the background
	// by a non-interactive shell ignores SIGINT, its children would
	// ignore too: handled here, they get the default.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT)
	defer signal.Stop(sigs)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd, out, pidFile := besideCmd(t, "TARGETS_SLEEP=60", "BESIDE_SLEEP=60", "AFTER_BESIDE=1")
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

// stopped fails t unless the checks' process group (their make's PID)
// is gone: the stand-in and the sleep it started.
func stopped(t *testing.T, pid, out string) {
	t.Helper()
	n, err := strconv.Atoi(pid)
	if err != nil {
		t.Fatalf("the checks' PID %q: %v (did they start?)\n%s", pid, err, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !errors.Is(syscall.Kill(-n, 0), syscall.ESRCH) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-n, syscall.SIGKILL)
			t.Fatalf("the checks' process group %d still runs after the script ended", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
