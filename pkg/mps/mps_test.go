package mps

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// fakeControl stands in for nvidia-cuda-mps-control: "-f" runs until a
// "quit" command; the client answers get_server_list while the daemon
// runs and the test has not made it hang, after 2 s if the test made it
// slow, and counts the checks it was asked.
const fakeControl = `#!/bin/sh
if [ "$1" = "-f" ]; then
  echo $$ > "$CUDA_MPS_PIPE_DIRECTORY/daemon.pid"
  [ -n "$GPUSHARE_TEST_SHM" ] && touch "/dev/shm/gpushare-mps-test-$$"
  echo started >> "$CUDA_MPS_LOG_DIRECTORY/starts"
  while [ ! -f "$CUDA_MPS_PIPE_DIRECTORY/quit" ]; do sleep 0.05; done
  echo quit >> "$CUDA_MPS_LOG_DIRECTORY/quits"
  rm -f "$CUDA_MPS_PIPE_DIRECTORY/quit" "$CUDA_MPS_PIPE_DIRECTORY/daemon.pid" "/dev/shm/gpushare-mps-test-$$"
  exit 0
fi
read cmd
pid=$(cat "$CUDA_MPS_PIPE_DIRECTORY/daemon.pid" 2>/dev/null) || exit 1
kill -0 "$pid" 2>/dev/null || exit 1
[ -f "$CUDA_MPS_PIPE_DIRECTORY/hang" ] && exit 1
case "$cmd" in
  get_server_list)
    echo check >> "$CUDA_MPS_LOG_DIRECTORY/checks"
    [ -f "$CUDA_MPS_PIPE_DIRECTORY/slow" ] && sleep 2
    exit 0 ;;
  quit) touch "$CUDA_MPS_PIPE_DIRECTORY/quit"; exit 0 ;;
esac
exit 1
`

type fixture struct {
	d      *Daemon
	cancel context.CancelFunc
	done   chan error
}

func TestMain(m *testing.M) {
	Shim()
	os.Exit(m.Run())
}

func start(t *testing.T) *fixture {
	t.Helper()
	return startWith(t, nil)
}

func startWith(t *testing.T, edit func(*Daemon)) *fixture {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nvidia-cuda-mps-control")
	if err := os.WriteFile(bin, []byte(fakeControl), 0o755); err != nil { //nolint:gosec // an executable test script
		t.Fatal(err)
	}
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	f := &fixture{d: &Daemon{Control: bin, PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"),
		Check: 100 * time.Millisecond, Logger: logger}, cancel: cancel, done: make(chan error, 1)}
	if edit != nil {
		edit(f.d)
	}
	go func() { f.done <- f.d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-f.done; err != nil {
			t.Error(err)
		}
	})
	f.waitLines(t, "starts", 1)
	return f
}

// lines counts the lines of a file the fake writes in its log directory.
func (f *fixture) lines(name string) int {
	b, err := os.ReadFile(filepath.Join(f.d.LogDir, name))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

func (f *fixture) waitLines(t *testing.T, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.lines(name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d lines, want %d", name, f.lines(name), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// healthyThenQuit checks that the daemon answers, then stops the
// supervisor and checks that the daemon was asked to quit.
func (f *fixture) healthyThenQuit(t *testing.T) {
	t.Helper()
	if err := f.d.Healthy(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.stopAsked(t)
}

// stopAsked stops the supervisor and checks that the daemon was asked to
// quit.
func (f *fixture) stopAsked(t *testing.T) {
	t.Helper()
	f.cancel()
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	f.done <- nil // for the cleanup
	if f.lines("quits") != 1 {
		t.Errorf("the daemon was not asked to quit")
	}
}

func TestCleanShutdown(t *testing.T) {
	f := start(t)
	f.healthyThenQuit(t)
}

// TestQuitDuringCheck stops the supervisor while a health check is under
// way: the check fails because of that, and the daemon must still be
// asked to quit, not killed as unresponsive.
func TestQuitDuringCheck(t *testing.T) {
	f := start(t)
	if err := os.WriteFile(filepath.Join(f.d.PipeDir, "slow"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitLines(t, "checks", f.lines("checks")+1)
	f.stopAsked(t)
}

func TestRestartWhenKilled(t *testing.T) {
	f := start(t)
	if err := syscall.Kill(f.pid(t), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.waitLines(t, "starts", 2)
}

func TestRestartWhenUnresponsive(t *testing.T) {
	f := start(t)
	if err := os.WriteFile(filepath.Join(f.d.PipeDir, "hang"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := os.Remove(filepath.Join(f.d.PipeDir, "hang")); err != nil {
		t.Fatal(err)
	}
	f.waitLines(t, "starts", 2)
}

// pid is the running fake daemon's process ID.
func (f *fixture) pid(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.d.PipeDir, "daemon.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestShmDir checks that the daemon sees ShmDir as /dev/shm, where its
// clients' containers get it mounted, and that the node's /dev/shm is
// left alone.
func TestShmDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("binding a directory over /dev/shm needs root")
	}
	t.Setenv("GPUSHARE_TEST_SHM", "1") // the fake marks its /dev/shm
	shm := filepath.Join(t.TempDir(), "shm")
	// The shim re-executes this test binary (race-instrumented under
	// make unit), which on a loaded machine can take longer to start the
	// fake than the 100 ms the other tests check at: a check before the
	// fake writes its pid fails, and the daemon is killed and restarted.
	f := startWith(t, func(d *Daemon) { d.ShmDir, d.Check = shm, 2*time.Second })
	name := "gpushare-mps-test-" + strconv.Itoa(f.pid(t))
	if _, err := os.Stat(filepath.Join(shm, name)); err != nil {
		t.Errorf("the daemon's /dev/shm is not the shm directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join("/dev/shm", name)); !os.IsNotExist(err) {
		t.Errorf("the daemon wrote into the node's /dev/shm (%v)", err)
	}
	st, err := os.Stat(shm)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Errorf("shm directory mode %v, want sticky and 0777 like /dev/shm", st.Mode())
	}
	f.healthyThenQuit(t)
}
