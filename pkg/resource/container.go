package resource

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// asked is one managed resource a container asks for.
type asked struct {
	name corev1.ResourceName
	// value is in MiB for Memory, as written otherwise.
	value int64
	unit  v1alpha1.MemoryUnit
}

// asks holds at most one resource per kind.
type asks map[v1alpha1.ResourceKind]asked

func (a asks) has(k v1alpha1.ResourceKind) bool { _, ok := a[k]; return ok }

// perGPU reports whether a asks any of HAMi's per-GPU kinds.
func (a asks) perGPU() bool {
	for k := range a {
		if k.PerGPU() {
			return true
		}
	}
	return false
}

// perGPURequest translates a container that asks HAMi's per-GPU kinds as
// HAMi does (its scheduler's GenerateResourceRequests and its webhook's
// defaults): N GPUs (the Count kind, else 1), each with the memory asked
// (MemoryPerGPU, else MemoryPercent, else all of it) and the compute asked
// (ComputePerGPU, above 100 taken as 100); a GPU whose memory is all asked
// and whose compute is not asked, or whose compute is 100, is taken whole.
func (t *translator) perGPURequest(c *corev1.Container, got asks) (*alloc.ContainerRequest, error) {
	for _, k := range []v1alpha1.ResourceKind{v1alpha1.KindMemory, v1alpha1.KindCompute} {
		if a, ok := got[k]; ok {
			other := got[v1alpha1.KindComputePerGPU].name
			for _, pk := range []v1alpha1.ResourceKind{v1alpha1.KindMemoryPerGPU, v1alpha1.KindMemoryPercent} {
				if got.has(pk) {
					other = got[pk].name
				}
			}
			return nil, t.fail(c, a.name, fmt.Sprintf("asks for all of the container's GPUs together, %s for each of them: keep the names of one system", other))
		}
	}
	cr := &alloc.ContainerRequest{Name: c.Name, Count: 1}
	if n, ok := got[v1alpha1.KindCount]; ok {
		cr.Count = int(n.value)
	}
	mem, pct := got[v1alpha1.KindMemoryPerGPU], got[v1alpha1.KindMemoryPercent]
	core, asksCore := got[v1alpha1.KindComputePerGPU]
	if pct.value > 100 {
		return nil, t.fail(c, pct.name, fmt.Sprintf("%d is more than 100 percent of a GPU's memory", pct.value))
	}
	whole := mem.value == 0 && (pct.value == 0 || pct.value == 100)
	switch {
	case asksCore && core.value >= alloc.FullCompute, whole && !asksCore:
		cr.Exclusive = true
		return cr, nil
	case mem.value > 0:
		cr.MemoryMiB = mem.value * int64(cr.Count)
	case whole:
		cr.MemoryPercent = 100
	default:
		cr.MemoryPercent = pct.value
	}
	cr.Compute = core.value
	if t.largest > 0 && mem.value > t.largest {
		return nil, t.fail(c, mem.name, fmt.Sprintf("%d MiB per GPU is more than the largest GPU holds (%d MiB)", mem.value, t.largest))
	}
	return cr, nil
}

// container translates one container; nil when it asks no GPU.
func (t *translator) container(c *corev1.Container) (*alloc.ContainerRequest, error) {
	got, err := t.read(c)
	if err != nil || len(got) == 0 {
		return nil, err
	}
	if got.has(v1alpha1.KindMPS) {
		return t.mpsRequest(c, got)
	}
	if got.perGPU() {
		return t.perGPURequest(c, got)
	}
	mem, core, count := got[v1alpha1.KindMemory], got[v1alpha1.KindCompute], got[v1alpha1.KindCount]
	cr := &alloc.ContainerRequest{Name: c.Name, Count: 1}
	if got.has(v1alpha1.KindCount) {
		cr.Count = int(count.value)
	}
	switch {
	case got.has(v1alpha1.KindCompute) && core.value >= alloc.FullCompute:
		if reason := wholeGPUs(core.value, mem, count); reason != "" {
			return nil, t.fail(c, core.name, reason)
		}
		cr.Exclusive, cr.Count = true, int(core.value/alloc.FullCompute)
	case got.has(v1alpha1.KindCompute):
		cr.Compute, cr.MemoryMiB = core.value, mem.value
	case got.has(v1alpha1.KindMemory):
		cr.MemoryMiB = mem.value
	default: // a count alone asks whole GPUs
		cr.Exclusive = true
	}
	if err := t.checkMemory(c, string(mem.name), mem.unit, cr); err != nil {
		return nil, err
	}
	return cr, nil
}

// read collects the managed resources of a container, at most one per kind,
// as positive whole numbers (memory in MiB).
func (t *translator) read(c *corev1.Container) (asks, error) {
	var got asks
	for _, name := range t.m.names {
		q, ok, reason := extended(&c.Resources, name)
		if !ok && reason == "" {
			continue
		}
		r := t.m.resources[name]
		if o, ok := t.m.overrides[name][t.pod.Namespace]; ok {
			r = o
		}
		var v int64
		if reason == "" {
			v, reason = positiveInt(q)
		}
		if reason == "" && v > math.MaxInt64/r.mib {
			reason = fmt.Sprintf("%s %s is too large", q.String(), r.unit)
		}
		if prev, dup := got[r.kind]; reason == "" && dup {
			reason = fmt.Sprintf("conflicts with %s: both ask %s; keep one", prev.name, kindNoun(r.kind))
		}
		if reason != "" {
			return nil, t.fail(c, name, reason)
		}
		if got == nil {
			got = asks{}
		}
		got[r.kind] = asked{name: name, value: v * r.mib, unit: r.unit}
	}
	return got, nil
}

// wholeGPUs checks a compute of 100 or more, which asks whole GPUs,
// against the memory and count asked with it.
func wholeGPUs(core int64, mem, count asked) string {
	n := core / alloc.FullCompute
	switch {
	case core%alloc.FullCompute != 0:
		lo, hi := n*alloc.FullCompute, (n+1)*alloc.FullCompute
		whole := fmt.Sprintf("%d whole GPUs", n)
		if n == 1 {
			whole = "one whole GPU"
		}
		return fmt.Sprintf("%d is above 100 and not a multiple of 100, which would strand part of a GPU; ask %d (%s) or %d, or below 100 for a share",
			core, lo, whole, hi)
	case mem.name != "":
		return fmt.Sprintf("%d asks %d whole GPU(s), which carry no memory share, but %s asks memory; drop %s, or ask compute below 100 to share a GPU",
			core, n, mem.name, mem.name)
	case count.name != "" && count.value != n:
		return fmt.Sprintf("%d asks %d whole GPU(s) but %s asks %d; make them agree or drop one", core, n, count.name, count.value)
	}
	return ""
}

// checkMemory rejects memory per GPU that the largest GPU, when known,
// cannot hold.
func (t *translator) checkMemory(c *corev1.Container, res string, unit v1alpha1.MemoryUnit, cr *alloc.ContainerRequest) error {
	per := cr.PerGPU().MemoryMiB
	if t.largest == 0 || per <= t.largest {
		return nil
	}
	reason := fmt.Sprintf("%d MiB per GPU is more than the largest GPU holds (%d MiB)", per, t.largest)
	if cr.GPUCount() > 1 {
		reason = fmt.Sprintf("%d MiB over %d GPUs is %d MiB per GPU, more than the largest GPU holds (%d MiB)",
			cr.MemoryMiB, cr.GPUCount(), per, t.largest)
	}
	if unit == v1alpha1.GiB {
		reason += fmt.Sprintf("; this resource model counts %s in GiB: if the device plugin counts MiB (--memory-unit=MiB), configure it with unit MiB", res)
	}
	return t.fail(c, corev1.ResourceName(res), reason)
}

func (t *translator) fail(c *corev1.Container, name corev1.ResourceName, reason string) error {
	return &RequestError{Pod: t.key, Container: c.Name, Resource: string(name), Reason: reason}
}

func kindNoun(k v1alpha1.ResourceKind) string {
	switch k {
	case v1alpha1.KindMemory, v1alpha1.KindMemoryPerGPU:
		return "GPU memory"
	case v1alpha1.KindMemoryPercent:
		return "a percent of GPU memory"
	case v1alpha1.KindCompute, v1alpha1.KindComputePerGPU:
		return "GPU compute"
	case v1alpha1.KindCount:
		return "a GPU count"
	default:
		return "MPS GPUs"
	}
}
