package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/trace"
)

// Workload is a cluster and the pods that arrive on it.
type Workload struct {
	Name  string
	Nodes []trace.Node
	Pods  []trace.Pod
}

// Capacity returns the cluster's GPUs in thousandths.
func (w *Workload) Capacity() int64 {
	var c int64
	for _, n := range w.Nodes {
		c += int64(n.GPUs) * 1000
	}
	return c
}

// nodes is CoreNodes, as the replay calls it.
func (w *Workload) nodes() ([]*alloc.Node, error) { return w.CoreNodes() }

// CoreNodes converts the trace's nodes for the core: GPU memory from the
// model (trace.GPUMemoryMiB), the trace's CPU and memory. The trace has
// no GPU topology, so GPUs carry none.
func (w *Workload) CoreNodes() ([]*alloc.Node, error) {
	out := make([]*alloc.Node, len(w.Nodes))
	for i, n := range w.Nodes {
		mib, ok := trace.GPUMemoryMiB(n.Model)
		if !ok && n.GPUs > 0 {
			return nil, fmt.Errorf("node %s: unknown GPU model %q", n.Name, n.Model)
		}
		an := &alloc.Node{Name: n.Name, CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB, GPUs: make([]alloc.GPU, n.GPUs)}
		for g := range an.GPUs {
			an.GPUs[g] = alloc.GPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", n.Name, g), Model: n.Model, MemoryMiB: mib, Healthy: true, NUMANode: -1}
		}
		if err := an.Validate(); err != nil {
			return nil, err
		}
		out[i] = an
	}
	return out, nil
}

// Request converts a trace pod. A fractional pod asks GPUMilli/10 percent
// of one GPU's compute; the trace ties memory to the same fraction, so
// booking compute alone is exact (a share fits exactly when both would).
func Request(p *trace.Pod) alloc.PodRequest {
	r := alloc.PodRequest{Key: p.Name, CPUMilli: p.CPUMilli, MemoryMiB: p.MemoryMiB}
	if p.GPUs == 0 {
		return r
	}
	c := alloc.ContainerRequest{Name: "main", Count: p.GPUs, Models: p.Models}
	if p.GPUMilli >= 1000 {
		c.Exclusive = true
	} else {
		c.Compute = p.GPUMilli / 10
	}
	r.Containers = []alloc.PodContainer{{ContainerRequest: c}}
	return r
}

// Shapes groups the pods by shape (CPU, GPU count, share, models, as the
// FGD paper does; memory is left out) and keeps the most frequent shapes
// until they cover the given fraction of pods, each weighted by its count:
// FGD's target workload.
func Shapes(pods []trace.Pod, coverage float64) []alloc.Shape {
	type key struct {
		cpu, mem, milli int64
		gpus            int
		models          string
	}
	counts := make(map[key]int64)
	for i := range pods {
		p := &pods[i]
		counts[key{p.CPUMilli, 0, p.GPUMilli, p.GPUs, strings.Join(p.Models, "|")}]++
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.gpus, b.gpus), cmp.Compare(a.milli, b.milli), cmp.Compare(a.cpu, b.cpu),
			cmp.Compare(a.mem, b.mem), strings.Compare(a.models, b.models))
	})
	var shapes []alloc.Shape
	var covered int64
	for _, k := range keys {
		if float64(covered) >= coverage*float64(len(pods)) {
			break
		}
		p := trace.Pod{CPUMilli: k.cpu, MemoryMiB: k.mem, GPUs: k.gpus, GPUMilli: k.milli}
		if k.models != "" {
			p.Models = strings.Split(k.models, "|")
		}
		r := Request(&p)
		sh := alloc.Shape{CPUMilli: k.cpu, MemoryMiB: k.mem, Count: k.gpus, Weight: counts[k]}
		if len(r.Containers) > 0 {
			sh.Demand = r.Containers[0].PerGPU()
		}
		shapes = append(shapes, sh)
		covered += counts[k]
	}
	return shapes
}
