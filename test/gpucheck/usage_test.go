//go:build gpucheck

package gpucheck

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// usagePart is the usage section: the backend's samples of one GPU
// while a CUDA process holds memory on it and computes.
type usagePart struct {
	part
	Workload string `json:"workload"`
	GPU      string `json:"gpu"`
	// AllocatedMiB is what the process allocated; the used memory must
	// rise by at least that much from BaselineUsedMiB.
	AllocatedMiB    int64 `json:"allocatedMiB"`
	BaselineUsedMiB int64 `json:"baselineUsedMiB"`
	PeakUsedMiB     int64 `json:"peakUsedMiB"`
	// PeakUtilizationPercent must be above 0 while it computes.
	PeakUtilizationPercent int `json:"peakUtilizationPercent"`
	// PIDListed says whether NVML listed the process by its PID (not in
	// a container with a PID namespace of its own), with ProcessMiB.
	PIDListed  bool  `json:"pidListed"`
	ProcessMiB int64 `json:"processMiB,omitempty"`
	Samples    int   `json:"samples"`
}

// usageAlloc is what the process allocates, in chunks of allocChunk
// (MiB).
const (
	usageAlloc = 1024
	allocChunk = 64
)

func checkUsage(ctx context.Context, t *testing.T, m *machine, p *usagePart) {
	defer p.end()
	if m.fake != nil {
		p.start(t, m.against(), "the node daemon's NVML backend sampling the fake, which counts what a stand-in process says it allocated (no CUDA)")
	} else {
		p.start(t, m.against(), "the node daemon's NVML backend sampling a GPU while a CUDA process allocates and computes on it")
	}
	if m.work == nil {
		p.Workload = "skipped: " + m.noWork
		p.skip(m.noWork)
		return
	}
	p.Workload = m.work.desc
	g, err := m.target()
	if err != nil {
		p.fail("%v", err)
		return
	}
	p.GPU = g.UUID
	base, err := usageOf(m.backend, g.UUID)
	if err != nil {
		p.fail("%v", err)
		return
	}
	p.BaselineUsedMiB = base.UsedMemoryMiB
	proc, err := m.work.start(ctx, []string{"CUDA_VISIBLE_DEVICES=" + g.UUID}, nil, "alloc", itoa(usageAlloc), itoa(allocChunk))
	if err != nil {
		p.fail("%v", err)
		return
	}
	defer proc.stop()
	r, err := proc.next(ctx, 3*time.Minute)
	if err != nil {
		p.fail("%v", err)
		return
	}
	p.AllocatedMiB = r.AllocatedMiB
	if r.AllocError != "" || r.AllocatedMiB != usageAlloc {
		p.fail("the CUDA process allocated %d of %d MiB: %s", r.AllocatedMiB, usageAlloc, r.AllocError)
		return
	}
	// Three seconds of samples while it computes: NVML's utilization
	// counts over its own sample period, up to a second.
	pid := proc.cmd.Process.Pid
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		u, err := usageOf(m.backend, g.UUID)
		if err != nil {
			p.fail("%v", err)
			return
		}
		p.Samples++
		p.PeakUsedMiB = max(p.PeakUsedMiB, u.UsedMemoryMiB)
		p.PeakUtilizationPercent = max(p.PeakUtilizationPercent, u.UtilizationPercent)
		for _, pr := range u.Processes {
			if pr.PID == pid {
				p.PIDListed, p.ProcessMiB = true, max(p.ProcessMiB, pr.UsedMemoryMiB)
			}
		}
	}
	done, err := proc.finish(ctx)
	if err != nil {
		p.fail("%v", err)
	} else if done.Iterations == 0 {
		p.fail("the CUDA process ran no computation while it was sampled")
	}
	if rise := p.PeakUsedMiB - p.BaselineUsedMiB; rise < p.AllocatedMiB {
		p.fail("used memory rose by %d MiB (%d to %d) while the process held %d MiB", rise, p.BaselineUsedMiB, p.PeakUsedMiB, p.AllocatedMiB)
	}
	if p.PeakUtilizationPercent == 0 {
		p.fail("utilization stayed 0%% over %d samples while the process computed", p.Samples)
	}
	if p.PIDListed && p.ProcessMiB < p.AllocatedMiB {
		p.fail("NVML lists the process with %d MiB; it holds %d MiB", p.ProcessMiB, p.AllocatedMiB)
	}
}

// usageOf is the GPU's usage as the backend samples it.
func usageOf(b gpu.Backend, uuid string) (gpu.Usage, error) {
	us, err := b.Usage()
	if err != nil {
		return gpu.Usage{}, fmt.Errorf("NVML backend usage: %w", err)
	}
	for _, u := range us {
		if u.UUID == uuid {
			return u, nil
		}
	}
	return gpu.Usage{}, fmt.Errorf("NVML backend usage lists no %s", uuid)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
