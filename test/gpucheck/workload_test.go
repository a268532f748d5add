//go:build gpucheck

package gpucheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// workload starts CUDA processes (testdata/workload.py, workload.cu, or
// in fake mode the stand-in fake-cuda-client.sh), all with one protocol:
//
//	probe | alloc MIB CHUNK_MIB | work UNITS
//
// each answering in JSON lines (report).
type workload struct {
	// impl is what it runs on: cupy, pytorch, nvcc or fake.
	impl string
	// desc says so in the report.
	desc string
	argv []string
	env  []string
	// canTime is false for the stand-in, which has no GPU to time
	// compute on.
	canTime bool
}

// workReport is one line a workload process prints.
type workReport struct {
	// Event is probe, allocated, done or error.
	Event string `json:"event"`
	Impl  string `json:"impl"`
	// AllocatedMiB is what alloc got; AllocError the allocation error
	// that stopped it, and OOM whether that was a lack of memory.
	AllocatedMiB int64  `json:"allocatedMiB"`
	AllocError   string `json:"allocError"`
	OOM          bool   `json:"oom"`
	// Iterations is how often alloc computed before stdin closed.
	Iterations int64 `json:"iterations"`
	// Units and Seconds: how long work took.
	Units   int64   `json:"units"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error"`
}

// process is a running workload.
type process struct {
	what   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan workReport
	exited chan struct{}
	// err and stderr are set once exited is closed.
	err    error
	stderr lockedBuffer
}

// lockedBuffer is a buffer written by exec and read by the check.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// probe runs "probe" and sets impl.
func (w *workload) probe(ctx context.Context) error {
	p, err := w.start(ctx, nil, nil, "probe")
	if err != nil {
		return err
	}
	r, err := p.next(ctx, 3*time.Minute)
	if err != nil {
		return err
	}
	if err := p.wait(time.Minute); err != nil {
		return err
	}
	w.impl = r.Impl
	return nil
}

// cleanEnv is this process's environment without what would make a
// workload an MPS client, preload HAMi-core, limit it or pick its GPUs.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CUDA_MPS_") || strings.HasPrefix(kv, "CUDA_DEVICE_") || strings.HasPrefix(kv, "LD_PRELOAD=") ||
			strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") || strings.HasPrefix(kv, "NVIDIA_VISIBLE_DEVICES=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// bind is a host directory the workload sees at another path, as a
// container's mount gives it.
type bind struct{ host, at string }

// start starts the workload with args and env added to a clean
// environment; with binds, in a mount namespace of its own with each
// host directory bound at its path, as the CDI edits mount the MPS
// daemon's /dev/shm or HAMi-core's lock directory in a container.
func (w *workload) start(ctx context.Context, env []string, binds []bind, args ...string) (*process, error) {
	argv := append(append([]string{}, w.argv...), args...)
	if len(binds) > 0 {
		// sh -c 'mkdir -p "$2" && mount --bind "$1" "$2" && ... &&
		// export LD_PRELOAD="$N" && shift N && exec "$@"' sh HOST AT ... LIB WORKLOAD...
		script, pre := "", []string{}
		for i, b := range binds {
			script += fmt.Sprintf(`mkdir -p "${%[2]d}" && mount --bind "${%[1]d}" "${%[2]d}" && `, 2*i+1, 2*i+2)
			pre = append(pre, b.host, b.at)
		}
		// A library to preload is for the workload, not for unshare,
		// sh and mount before the mounts are there.
		if i := slices.IndexFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "LD_PRELOAD=") }); i >= 0 {
			pre = append(pre, strings.TrimPrefix(env[i], "LD_PRELOAD="))
			script += fmt.Sprintf(`export LD_PRELOAD="${%d}" && `, len(pre))
			env = slices.Delete(slices.Clone(env), i, i+1)
		}
		script += fmt.Sprintf(`shift %d && exec "$@"`, len(pre))
		argv = append(append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"}, pre...), argv...)
	}
	c := exec.CommandContext(ctx, argv[0], argv[1:]...) //nolint:gosec // the check's own workload
	c.Env = append(append(cleanEnv(), w.env...), env...)
	c.WaitDelay = 5 * time.Second
	p := &process{what: fmt.Sprintf("%s %s", w.impl, strings.Join(args, " ")), cmd: c,
		lines: make(chan workReport, 8), exited: make(chan struct{})}
	c.Stderr = &p.stderr
	stdout, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = c.StdinPipe(); err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", p.what, err)
	}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			var r workReport
			if json.Unmarshal(s.Bytes(), &r) == nil && r.Event != "" {
				p.lines <- r
			}
		}
		close(p.lines)
		p.err = c.Wait()
		close(p.exited)
	}()
	return p, nil
}

// next waits up to timeout for the process's next report; an error
// report is an error.
func (p *process) next(ctx context.Context, timeout time.Duration) (workReport, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r, ok := <-p.lines:
		if !ok {
			<-p.exited
			status := "exit status 0"
			if p.err != nil {
				status = p.err.Error()
			}
			return r, fmt.Errorf("%s exited (%s) without a report: %s", p.what, status, tail(p.stderr.String()))
		}
		if r.Event == "error" {
			return r, fmt.Errorf("%s: %s", p.what, r.Error)
		}
		return r, nil
	case <-timer.C:
		return workReport{}, fmt.Errorf("%s: no report in %v: %s", p.what, timeout, tail(p.stderr.String()))
	case <-ctx.Done():
		return workReport{}, fmt.Errorf("%s: %w", p.what, ctx.Err())
	}
}

// running reports whether the process has not exited.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// wait waits up to timeout for the process to exit, and says how it
// failed if it did.
func (p *process) wait(timeout time.Duration) error {
	select {
	case <-p.exited:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not exit in %v; killed", p.what, timeout)
	}
	if p.err != nil {
		return fmt.Errorf("%s: %w: %s", p.what, p.err, tail(p.stderr.String()))
	}
	return nil
}

// finish closes stdin, which ends alloc's computing, and returns its
// last report.
func (p *process) finish(ctx context.Context) (workReport, error) {
	_ = p.stdin.Close()
	r, err := p.next(ctx, time.Minute)
	return r, errors.Join(err, p.wait(time.Minute))
}

// stop kills the process if it still runs (a check that failed
// half-way).
func (p *process) stop() {
	if p.running() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
