//go:build gpucheck

package gpucheck

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/mps"
)

// mpsPart is the MPS section: the control daemon run by the node
// daemon's supervisor, and clients with the environment and mounts the
// CDI edits give MPS containers.
type mpsPart struct {
	part
	Control string `json:"control"`
	// Shm says which /dev/shm the daemon and its clients share.
	Shm        string `json:"shm"`
	Workload   string `json:"workload"`
	Supervisor string `json:"supervisor"`
	shares
}

// The MPS environment the CDI edits give, and the thread limit's
// variable.
const (
	mpsPrefix    = "CUDA_MPS_"
	mpsThreadVar = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
)

// mpsThreadRange is how far from the expected slowdown a kernel under
// MPS's thread limit may be: MPS limits the threads a client's kernels
// get, so the time scales closely (4.05x to 4.83x measured for 4x).
var mpsThreadRange = [2]float64{0.6, 1.5}

func checkMPS(ctx context.Context, t *testing.T, m *machine, p *mpsPart) {
	defer p.end()
	if m.fake != nil {
		p.start(t, m.against(), "the node daemon's MPS supervisor (pkg/mps) running a stand-in control daemon; stand-in clients with the CDI edits' environment and mounts (pkg/cdi) that need the daemon's pipe directory and /dev/shm and enforce CUDA_MPS_PINNED_DEVICE_MEM_LIMIT themselves; no compute to time")
	} else {
		p.start(t, m.against(), "the node daemon's MPS supervisor (pkg/mps) running nvidia-cuda-mps-control; CUDA clients with the CDI edits' environment and mounts (pkg/cdi)")
	}
	p.ThreadLimit.Status = "not run"
	if m.control == "" {
		p.shares.skip(&p.part, m.noControl)
		return
	}
	p.Control = filepath.Base(m.control)
	dir := filepath.Join(m.dir, "mps")
	var shm string
	shm, p.Shm = shmDir(filepath.Join(dir, "shm"))
	s := supervise(ctx, t, &mps.Daemon{Control: m.control, PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"),
		ShmDir: shm, Check: time.Second})
	defer p.stop(ctx, s)
	took, err := s.waitHealthy(ctx)
	if err != nil {
		p.fail("%v", err)
		return
	}
	p.Supervisor = fmt.Sprintf("started; answered get_server_list after %v", took)

	if m.work == nil {
		p.Workload = "skipped: " + m.noWork
		p.ThreadLimit.Status = "skipped: " + m.noWork
		return
	}
	p.Workload = m.work.desc
	g, err := m.target()
	if err != nil {
		p.fail("%v", err)
		return
	}
	mk := mpsClient(g.Index, g.UUID, &cdi.MPS{PipeDir: s.d.PipeDir, LogDir: s.d.LogDir, ShmDir: s.d.ShmDir})
	p.check(ctx, &p.part, m.work, mk, mpsPrefix, mpsThreadVar, mpsThreadRange)
}

// shmDir is the MPS daemon's /dev/shm (--mps-shm-dir) where the check can
// give the clients the same: path as root with unshare (unless
// $GPUSHARE_GPU_CHECK_SHM=off), else "", the node's. It says which.
func shmDir(path string) (string, string) {
	node := "the node's /dev/shm (clients need hostIPC): "
	_, err := exec.LookPath("unshare")
	switch {
	case os.Getenv(envShm) == "off":
		return "", node + envShm + "=off"
	case os.Geteuid() != 0:
		return "", node + "not root, cannot bind a directory over /dev/shm"
	case err != nil:
		return "", node + "no unshare to give the clients their /dev/shm"
	}
	return path, "a directory of its own bound over /dev/shm for the daemon (as --mps-shm-dir) and the clients (as the CDI edits mount it)"
}

// supervised is an MPS control daemon run by the node daemon's
// supervisor, with the supervisor's log kept.
type supervised struct {
	d       *mps.Daemon
	log     ktesting.Underlier
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

// supervise starts d's supervisor.
func supervise(ctx context.Context, t *testing.T, d *mps.Daemon) *supervised {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	d.Logger = logger
	ctx, cancel := context.WithCancel(ctx)
	s := &supervised{d: d, log: logger.GetSink().(ktesting.Underlier), cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- d.Run(ctx) }()
	return s
}

// waitHealthy waits for the daemon to answer, and says how long it took.
func (s *supervised) waitHealthy(ctx context.Context) (time.Duration, error) {
	began := time.Now()
	for s.d.Healthy(ctx) != nil {
		if time.Since(began) > 20*time.Second {
			return 0, fmt.Errorf("the MPS control daemon does not answer 20 s after start: %s; control.log: %s",
				tail(s.log.GetBuffer().String()), readTail(filepath.Join(s.d.LogDir, "control.log")))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(began).Round(100 * time.Millisecond), nil
}

// stop stops the supervisor, once: it must ask the daemon to quit, the
// daemon must, and must not have been restarted meanwhile (it died).
func (p *mpsPart) stop(ctx context.Context, s *supervised) {
	p.t.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	began := time.Now()
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			p.fail("MPS supervisor: %v", err)
		}
	case <-time.After(30 * time.Second):
		p.fail("MPS supervisor did not return within 30 s of its context ending")
		return
	}
	took := time.Since(began).Round(100 * time.Millisecond)
	logs := s.log.GetBuffer().String()
	var quit, restarted bool
	for _, line := range strings.Split(logs, "\n") {
		restarted = restarted || strings.Contains(line, "restarting")
		quit = quit || strings.Contains(line, "MPS control daemon stopped") && !strings.Contains(line, "restarting")
	}
	// A daemon that does not quit is killed after 10 s, and the
	// supervisor then logs no stop.
	if quit {
		p.Supervisor += fmt.Sprintf("; quit when asked (%v)", took)
	} else {
		p.fail("the MPS control daemon did not quit when asked (%v): %s", took, tail(logs))
	}
	if restarted {
		p.fail("the MPS control daemon died during the check and was restarted: %s", tail(logs))
	}
	if s.d.Healthy(ctx) == nil {
		p.fail("the MPS control daemon still answers after the supervisor stopped")
	}
}

// mpsClient is what an MPS container with this share of the GPU gets
// from the CDI edits: its environment, and the host directory mounted at
// its /dev/shm, if any.
func mpsClient(index int, uuid string, cfg *cdi.MPS) clientOf {
	return func(name string, memMiB, compute int64) (env []string, binds []bind, err error) {
		c := &gpusharev1.ContainerAllocation{Name: name, Kind: gpusharev1.ContainerApp,
			GPUs: []gpusharev1.GPUShare{{Index: index, UUID: uuid, MemoryMiB: memMiB, Compute: compute}}}
		edits := cdi.GPUEdits(c, cfg, nil)
		for _, mnt := range edits.Mounts {
			switch {
			case mnt.ContainerPath == "/dev/shm":
				binds = append(binds, bind{host: mnt.HostPath, at: mnt.ContainerPath})
			case mnt.ContainerPath != mnt.HostPath:
				return nil, nil, fmt.Errorf("the CDI edits mount %s at %s: the check runs clients on the host and cannot", mnt.HostPath, mnt.ContainerPath)
			}
		}
		// Outside a container, CUDA_VISIBLE_DEVICES does what the
		// runtime does with NVIDIA_VISIBLE_DEVICES: the client sees its
		// GPU alone.
		return append(edits.Env, "CUDA_VISIBLE_DEVICES="+uuid), binds, nil
	}
}

func round(f float64) float64 { return math.Round(f*1000) / 1000 }

// readTail is the end of a file, for messages.
func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tail(string(b))
}
