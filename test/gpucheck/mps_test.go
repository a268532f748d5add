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
	// Clients are the two clients of one GPU: "over" allocates past
	// its memory limit and must get an allocation error, "within" must
	// keep running meanwhile.
	Clients []mpsClient `json:"clients"`
	// ThreadLimit is a compute kernel timed without and under a thread
	// limit.
	ThreadLimit threadLimit `json:"threadLimit"`
}

// mpsClient is one client: its limits as the CDI edits set them, what it
// asked for and what it got.
type mpsClient struct {
	Name         string   `json:"name"`
	Env          []string `json:"env"`
	AskedMiB     int64    `json:"askedMiB"`
	AllocatedMiB int64    `json:"allocatedMiB"`
	AllocError   string   `json:"allocError,omitempty"`
	// Iterations the client computed before it was told to stop (after
	// the other client was done).
	Iterations int64 `json:"iterations,omitempty"`
}

// threadLimit times the same work as an MPS client without a thread
// limit (a 100% share) and under CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
type threadLimit struct {
	Status          string  `json:"status"`
	Percent         int64   `json:"percent,omitempty"`
	Units           int64   `json:"units,omitempty"`
	BaselineSeconds float64 `json:"baselineSeconds,omitempty"`
	LimitedSeconds  float64 `json:"limitedSeconds,omitempty"`
	// Ratio is LimitedSeconds over BaselineSeconds; Expected 100 /
	// Percent, and the ratio must lie within [0.6, 1.5] times it.
	Ratio    float64 `json:"ratio,omitempty"`
	Expected float64 `json:"expected,omitempty"`
}

// The clients' shares of the GPU: memory each may pin, what each
// allocates, and the thread limit timed. MPS counts a client's CUDA
// context, its libraries' workspaces and its computing buffers against
// the limit too (an H100 with driver 580 and CuPy: about 320 MiB of
// context), so "within" allocates a quarter of the limit.
const (
	limitMiB      = 2048
	withinMiB     = 512
	overMiB       = 4096
	threadPercent = 25
)

func checkMPS(ctx context.Context, t *testing.T, m *machine, p *mpsPart) {
	defer p.end()
	if m.fake != nil {
		p.start(t, m.against(), "the node daemon's MPS supervisor (pkg/mps) running a stand-in control daemon; stand-in clients with the CDI edits' environment and mounts (pkg/cdi) that need the daemon's pipe directory and /dev/shm and enforce CUDA_MPS_PINNED_DEVICE_MEM_LIMIT themselves; no compute to time")
	} else {
		p.start(t, m.against(), "the node daemon's MPS supervisor (pkg/mps) running nvidia-cuda-mps-control; CUDA clients with the CDI edits' environment and mounts (pkg/cdi)")
	}
	p.ThreadLimit.Status = "not run"
	if m.control == "" {
		p.ThreadLimit.Status = "skipped: " + m.noControl
		p.skip(m.noControl)
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
	cfg := &cdi.MPS{PipeDir: s.d.PipeDir, LogDir: s.d.LogDir, ShmDir: s.d.ShmDir}
	p.checkLimits(ctx, m.work, cfg, g.Index, g.UUID)
	if m.work.canTime {
		p.checkThreads(ctx, m.work, cfg, g.Index, g.UUID)
	} else {
		p.ThreadLimit.Status = "skipped: the fake has no GPU to time compute on"
	}
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

// client is what an MPS container with this share of the GPU gets from
// the CDI edits: its environment, and the host directory mounted at its
// /dev/shm ("" for none).
func client(name string, index int, uuid string, memMiB, compute int64, cfg *cdi.MPS) (env []string, shm string, err error) {
	c := &gpusharev1.ContainerAllocation{Name: name, Kind: gpusharev1.ContainerApp,
		GPUs: []gpusharev1.GPUShare{{Index: index, UUID: uuid, MemoryMiB: memMiB, Compute: compute}}}
	edits := cdi.GPUEdits(c, cfg, nil)
	for _, mnt := range edits.Mounts {
		switch {
		case mnt.ContainerPath == "/dev/shm":
			shm = mnt.HostPath
		case mnt.ContainerPath != mnt.HostPath:
			return nil, "", fmt.Errorf("the CDI edits mount %s at %s: the check runs clients on the host and cannot", mnt.HostPath, mnt.ContainerPath)
		}
	}
	// Outside a container, CUDA_VISIBLE_DEVICES does what the runtime
	// does with NVIDIA_VISIBLE_DEVICES: the client sees its GPU alone.
	return append(edits.Env, "CUDA_VISIBLE_DEVICES="+uuid), shm, nil
}

// mpsEnv is the part of env the report shows.
func mpsEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "CUDA_MPS_") {
			out = append(out, kv)
		}
	}
	return out
}

// checkLimits runs two clients of the GPU with limitMiB each: "within"
// allocates less and computes; "over" allocates past it and must get an
// allocation error while "within" keeps running.
func (p *mpsPart) checkLimits(ctx context.Context, w *workload, cfg *cdi.MPS, index int, uuid string) {
	p.t.Helper()
	var procs [2]*process
	for i, c := range []struct {
		name  string
		asked int64
	}{{"within", withinMiB}, {"over", overMiB}} {
		env, shm, err := client(c.name, index, uuid, limitMiB, 50, cfg)
		if err != nil {
			p.fail("%v", err)
			return
		}
		p.Clients = append(p.Clients, mpsClient{Name: c.name, Env: mpsEnv(env), AskedMiB: c.asked})
		if procs[i], err = w.start(ctx, env, shm, "alloc", itoa(c.asked), itoa(allocChunk)); err != nil {
			p.fail("%v", err)
			return
		}
		defer procs[i].stop()
		r, err := procs[i].next(ctx, 3*time.Minute)
		if err != nil {
			p.fail("client %q: %v", c.name, err)
			return
		}
		p.Clients[i].AllocatedMiB, p.Clients[i].AllocError = r.AllocatedMiB, r.AllocError
	}
	within, over := &p.Clients[0], &p.Clients[1]
	if within.AllocError != "" || within.AllocatedMiB != withinMiB {
		p.fail("client %q allocated %d of %d MiB under its %d MiB limit: %s", within.Name, within.AllocatedMiB, withinMiB, limitMiB, within.AllocError)
	}
	switch {
	case over.AllocError == "":
		p.fail("client %q allocated %d MiB past its %d MiB limit without an allocation error", over.Name, over.AllocatedMiB, limitMiB)
	case over.AllocatedMiB > limitMiB:
		p.fail("client %q allocated %d MiB, past its %d MiB limit, before its allocation error", over.Name, over.AllocatedMiB, limitMiB)
	}
	// Done: it exited at its allocation error, or else it computes
	// until its stdin closes.
	_ = procs[1].stdin.Close()
	if err := procs[1].wait(time.Minute); err != nil {
		p.fail("client %q: %v", over.Name, err)
	}
	// The other client still runs, and computes, a while after.
	time.Sleep(time.Second)
	if !procs[0].running() {
		p.fail("client %q stopped while %q hit its limit: %v", within.Name, over.Name, procs[0].wait(0))
		return
	}
	r, err := procs[0].finish(ctx)
	if err != nil {
		p.fail("client %q: %v", within.Name, err)
		return
	}
	within.Iterations = r.Iterations
	if r.Iterations == 0 {
		p.fail("client %q computed nothing", within.Name)
	}
}

// checkThreads times the same work as a client with the whole GPU's
// threads and as one limited to threadPercent: the limited one must take
// about 100/threadPercent times as long.
func (p *mpsPart) checkThreads(ctx context.Context, w *workload, cfg *cdi.MPS, index int, uuid string) {
	p.t.Helper()
	tl := &p.ThreadLimit
	tl.Status, tl.Percent = "running", threadPercent
	defer func() {
		if tl.Status == "running" {
			tl.Status = "fail"
		}
	}()
	time1 := func(compute, units int64) (float64, error) {
		env, shm, err := client(fmt.Sprintf("compute-%d", compute), index, uuid, limitMiB, compute, cfg)
		if err != nil {
			return 0, err
		}
		want := fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", compute)
		if has := strings.Contains(strings.Join(env, "\n"), want); has != (compute < 100) {
			return 0, fmt.Errorf("a client with %d%% of the GPU has environment %q", compute, mpsEnv(env))
		}
		proc, err := w.start(ctx, env, shm, "work", itoa(units))
		if err != nil {
			return 0, err
		}
		defer proc.stop()
		r, err := proc.next(ctx, 4*time.Minute)
		if err == nil {
			err = proc.wait(time.Minute)
		}
		return r.Seconds, err
	}
	// Enough work for the baseline to take a second or two.
	units := int64(20)
	base, err := time1(100, units)
	for err == nil && base < 1 && units < 1<<24 {
		units *= int64(math.Ceil(1.5 / math.Max(base, 0.01)))
		base, err = time1(100, units)
	}
	if err != nil {
		p.fail("baseline client: %v", err)
		return
	}
	limited, err := time1(threadPercent, units)
	if err != nil {
		p.fail("client with %d%% of the threads: %v", threadPercent, err)
		return
	}
	tl.Units, tl.BaselineSeconds, tl.LimitedSeconds = units, round(base), round(limited)
	tl.Ratio, tl.Expected = round(limited/base), 100.0/threadPercent
	if tl.Ratio < 0.6*tl.Expected || tl.Ratio > 1.5*tl.Expected {
		p.fail("under CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d the same work took %.2fx as long (%.2f s against %.2f s); want about %.1fx",
			threadPercent, tl.Ratio, limited, base, tl.Expected)
		return
	}
	tl.Status = "pass"
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
