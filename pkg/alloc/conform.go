package alloc

import (
	"errors"
	"fmt"
)

// ErrNonconforming is returned by Conform for a placement that is not what
// the pod asks for.
var ErrNonconforming = errors.New("placement is not what the pod asks for")

// Conform reports whether placement p gives pod exactly what it asks of
// node n, as Place would: the pod's GPU containers in order, each of its
// kind, on as many distinct GPUs as it asks for, and on each GPU the
// usage its demand books there:
//
//	shared:    memory = ⌈MemoryMiB / Count⌉, compute = Compute
//	percent:   memory = ⌊the GPU's memory · MemoryPercent / 100⌋, compute = Compute
//	exclusive: memory = the GPU's memory, compute = its compute capacity
//
// of a model the container allows, and only whole GPUs on a whole-card
// node. A GPU index past n's GPUs stands for a GPU the node no longer
// lists: its count and shared usage are checked, its model and size are
// not known. With n nil only the shape is checked.
//
// A stored allocation record passes Conform before it is booked or
// served, so that a record written by hand cannot book more than the
// pod's own spec asks for.
func Conform(p *Placement, pod *PodRequest, n *Node) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrNonconforming, fmt.Sprintf(format, args...))
	}
	if len(p.Containers) != len(pod.Containers) {
		return fail("it names %d GPU containers, the pod has %d", len(p.Containers), len(pod.Containers))
	}
	for i := range pod.Containers {
		want, got := &pod.Containers[i], &p.Containers[i]
		if got.Name != want.Name || got.Kind != want.Kind {
			return fail("GPU container %d is %s %q, the pod's is %s %q", i, got.Kind, got.Name, want.Kind, want.Name)
		}
		if len(got.GPUs) != want.GPUCount() {
			return fail("container %q gets %d GPUs, it asks for %d", want.Name, len(got.GPUs), want.GPUCount())
		}
		if n != nil && n.Mode == WholeCard && !want.Exclusive {
			return fail("container %q asks for a share, node %s hands out whole GPUs only", want.Name, n.Name)
		}
		d := want.PerGPU()
		seen := make(map[int]bool, len(got.GPUs))
		for _, a := range got.GPUs {
			if seen[a.GPU] {
				return fail("container %q gets GPU %d twice", want.Name, a.GPU)
			}
			seen[a.GPU] = true
			if err := conformGPU(&d, a, n); err != nil {
				return fail("container %q: %v", want.Name, err)
			}
		}
	}
	return nil
}

// conformGPU checks one GPU of a container against its per-GPU demand.
func conformGPU(d *Demand, a Assignment, n *Node) error {
	var g *GPU
	if n != nil && a.GPU >= 0 && a.GPU < len(n.GPUs) {
		g = &n.GPUs[a.GPU]
	}
	switch {
	case g != nil && !allows(d.Models, g.Model):
		return fmt.Errorf("GPU %d is a %s, the container allows %v", a.GPU, g.Model, d.Models)
	case g != nil && !d.Filter.Allows(g):
		return fmt.Errorf("GPU %d (%s, %s) is one the pod's annotations exclude (%s)", a.GPU, g.Model, g.UUID, d.Filter)
	case d.Exclusive && g != nil && a.Usage != d.usageOn(g):
		want := d.usageOn(g)
		return fmt.Errorf("GPU %d books %d MiB and %d%% compute, the whole GPU is %d MiB and %d%%",
			a.GPU, a.MemoryMiB, a.Compute, want.MemoryMiB, want.Compute)
	case d.Exclusive && (a.MemoryMiB <= 0 || a.Compute <= 0):
		return fmt.Errorf("GPU %d books %d MiB and %d%% compute of a whole GPU", a.GPU, a.MemoryMiB, a.Compute)
	case !d.Exclusive && d.MemoryPercent > 0 && g != nil && a.Usage != d.usageOn(g):
		want := d.usageOn(g)
		return fmt.Errorf("GPU %d books %d MiB and %d%% compute, the container asks for %d%% of its %d MiB (%d MiB) and %d%%",
			a.GPU, a.MemoryMiB, a.Compute, d.MemoryPercent, g.MemoryMiB, want.MemoryMiB, want.Compute)
	case !d.Exclusive && d.MemoryPercent > 0 && (a.MemoryMiB <= 0 || a.Compute != d.Compute):
		return fmt.Errorf("GPU %d books %d MiB and %d%% compute, the container asks for %d%% of its memory and %d%%",
			a.GPU, a.MemoryMiB, a.Compute, d.MemoryPercent, d.Compute)
	case !d.Exclusive && d.MemoryPercent == 0 && (a.MemoryMiB != d.MemoryMiB || a.Compute != d.Compute):
		return fmt.Errorf("GPU %d books %d MiB and %d%% compute, the container asks for %d MiB and %d%%",
			a.GPU, a.MemoryMiB, a.Compute, d.MemoryMiB, d.Compute)
	}
	return nil
}
