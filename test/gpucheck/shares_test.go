//go:build gpucheck

package gpucheck

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

// shares is what the MPS and HAMi-core sections both check: two clients
// of one GPU, each with a share of it as the CDI edits give it, and a
// compute kernel timed without and under a share of the GPU's compute.
type shares struct {
	// Clients are the two clients of one GPU: "over" allocates past
	// its memory limit and must get an allocation error, "within" must
	// keep running meanwhile.
	Clients []shareClient `json:"clients"`
	// ThreadLimit is a compute kernel timed without and under a share
	// of the GPU's compute.
	ThreadLimit threadLimit `json:"threadLimit"`
}

// shareClient is one client: its limits as the CDI edits set them, what
// it asked for and what it got.
type shareClient struct {
	Name         string   `json:"name"`
	Env          []string `json:"env"`
	AskedMiB     int64    `json:"askedMiB"`
	AllocatedMiB int64    `json:"allocatedMiB"`
	AllocError   string   `json:"allocError,omitempty"`
	// Iterations the client computed before it was told to stop (after
	// the other client was done).
	Iterations int64 `json:"iterations,omitempty"`
}

// threadLimit times the same work as a client with the whole GPU (a 100%
// share) and under a share of its compute (MPS's
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, HAMi-core's CUDA_DEVICE_SM_LIMIT).
type threadLimit struct {
	Status          string  `json:"status"`
	Percent         int64   `json:"percent,omitempty"`
	Units           int64   `json:"units,omitempty"`
	BaselineSeconds float64 `json:"baselineSeconds,omitempty"`
	LimitedSeconds  float64 `json:"limitedSeconds,omitempty"`
	// Ratio is LimitedSeconds over BaselineSeconds; Expected 100 /
	// Percent, and the ratio must lie within Range times it.
	Ratio    float64   `json:"ratio,omitempty"`
	Expected float64   `json:"expected,omitempty"`
	Range    []float64 `json:"range,omitempty"`
}

// The clients' shares of the GPU: memory each may use, what each
// allocates, and the share of compute timed. MPS counts a client's CUDA
// context, its libraries' workspaces and its computing buffers against
// the limit too (an H100 with driver 580 and CuPy: about 320 MiB of
// context), so "within" allocates a quarter of the limit.
const (
	limitMiB      = 2048
	withinMiB     = 512
	overMiB       = 4096
	threadPercent = 25
)

// clientOf gives a client named name, with memMiB of its GPU's memory
// and compute percent of its compute, what a container with that share
// gets from the CDI edits: its environment, and the host directories
// mounted in it.
type clientOf func(name string, memMiB, compute int64) (env []string, binds []bind, err error)

// shown is the part of env that prefix names, for the report.
func shown(env []string, prefix string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// skip records in section p why neither check of s can run.
func (s *shares) skip(p *part, why string) {
	p.t.Helper()
	s.ThreadLimit.Status = "skipped: " + why
	p.skip(why)
}

// check runs checkLimits, then checkThreads where w can time compute.
func (s *shares) check(ctx context.Context, p *part, w *workload, mk clientOf, prefix, limitVar string, rng [2]float64) {
	p.t.Helper()
	s.checkLimits(ctx, p, w, mk, prefix)
	if w.canTime {
		s.checkThreads(ctx, p, w, mk, limitVar, rng)
	} else {
		s.ThreadLimit.Status = "skipped: the fake has no GPU to time compute on"
	}
}

// checkLimits runs two clients of the GPU with limitMiB each: "within"
// allocates less and computes; "over" allocates past it and must get an
// allocation error while "within" keeps running. The report shows each
// client's environment that starts with prefix.
func (s *shares) checkLimits(ctx context.Context, p *part, w *workload, mk clientOf, prefix string) {
	p.t.Helper()
	var procs [2]*process
	for i, c := range []struct {
		name  string
		asked int64
	}{{"within", withinMiB}, {"over", overMiB}} {
		env, binds, err := mk(c.name, limitMiB, 50)
		if err != nil {
			p.fail("%v", err)
			return
		}
		s.Clients = append(s.Clients, shareClient{Name: c.name, Env: shown(env, prefix), AskedMiB: c.asked})
		if procs[i], err = w.start(ctx, env, binds, "alloc", itoa(c.asked), itoa(allocChunk)); err != nil {
			p.fail("%v", err)
			return
		}
		defer procs[i].stop()
		r, err := procs[i].next(ctx, 3*time.Minute)
		if err != nil {
			p.fail("client %q: %v", c.name, err)
			return
		}
		s.Clients[i].AllocatedMiB, s.Clients[i].AllocError = r.AllocatedMiB, r.AllocError
	}
	within, over := &s.Clients[0], &s.Clients[1]
	if within.AllocError != "" || within.AllocatedMiB != withinMiB {
		p.fail("client %q allocated %d of %d MiB under its %d MiB limit: %s", within.Name, within.AllocatedMiB, withinMiB, limitMiB, within.AllocError)
	}
	switch {
	case over.AllocError == "":
		p.fail("client %q allocated %d MiB past its %d MiB limit without an allocation error: %s",
			over.Name, over.AllocatedMiB, limitMiB, tail(procs[1].stderr.String()))
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

// checkThreads times the same work as a client with the whole GPU and as
// one limited to threadPercent of its compute, which the CDI edits set
// in variable limitVar: the limited one must take about
// 100/threadPercent times as long, within rng times that.
func (s *shares) checkThreads(ctx context.Context, p *part, w *workload, mk clientOf, limitVar string, rng [2]float64) {
	p.t.Helper()
	tl := &s.ThreadLimit
	tl.Status, tl.Percent, tl.Range = "running", threadPercent, rng[:]
	defer func() {
		if tl.Status == "running" {
			tl.Status = "fail"
		}
	}()
	time1 := func(compute, units int64) (float64, error) {
		env, binds, err := mk(fmt.Sprintf("compute-%d", compute), limitMiB, compute)
		if err != nil {
			return 0, err
		}
		want := fmt.Sprintf("%s=%d", limitVar, compute)
		if has := strings.Contains(strings.Join(env, "\n"), want); has != (compute < 100) {
			return 0, fmt.Errorf("a client with %d%% of the GPU has environment %q", compute, env)
		}
		proc, err := w.start(ctx, env, binds, "work", itoa(units))
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
		p.fail("client with %d%% of the GPU's compute: %v", threadPercent, err)
		return
	}
	tl.Units, tl.BaselineSeconds, tl.LimitedSeconds = units, round(base), round(limited)
	tl.Ratio, tl.Expected = round(limited/base), 100.0/threadPercent
	if tl.Ratio < rng[0]*tl.Expected || tl.Ratio > rng[1]*tl.Expected {
		p.fail("under %s=%d the same work took %.2fx as long (%.2f s against %.2f s); want %.1fx to %.1fx",
			limitVar, threadPercent, tl.Ratio, limited, base, rng[0]*tl.Expected, rng[1]*tl.Expected)
		return
	}
	tl.Status = "pass"
}
