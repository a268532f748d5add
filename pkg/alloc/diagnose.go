package alloc

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Diagnosis summarises why a pod fits no node, for a pod event.
type Diagnosis struct {
	Nodes    int
	ByReason map[Reason]int
	// Largest free GPU memory on any node, and what the pod needs per GPU,
	// when some node was short of GPU memory.
	LargestFreeMiB int64
	NeedMiB        int64
	// The most GPUs one container needs and the most healthy GPUs any
	// node has, when some node had too few (or too few healthy).
	NeedGPUs, MostGPUs int
	// Models the pod allows, when some node had no GPU of them.
	Models []string
	// Excluded is what the pod's GPU filter asks, when it excluded every
	// GPU of some node.
	Excluded string
	// The most MPS GPUs one container needs and the most any node has,
	// when some node had too few GPUs under MPS.
	NeedMPS, MostMPS int
}

// Diagnose aggregates per-node reasons over nodes nodes (some of which may
// have been rejected before the core saw them).
func Diagnose(nodes int, unfits []*Unfit) Diagnosis {
	d := Diagnosis{Nodes: nodes, ByReason: make(map[Reason]int)}
	for _, u := range unfits {
		seen := make(map[Reason]bool, len(u.Reasons))
		for _, r := range u.Reasons {
			if !seen[r.Reason] {
				d.ByReason[r.Reason]++
				seen[r.Reason] = true
			}
			switch r.Reason {
			case ReasonGPUMemory, ReasonGPUTooSmall:
				d.LargestFreeMiB = max(d.LargestFreeMiB, r.Free)
				d.NeedMiB = max(d.NeedMiB, r.Requested)
			case ReasonGPUCount, ReasonUnhealthy:
				d.NeedGPUs = max(d.NeedGPUs, r.Needed)
				d.MostGPUs = max(d.MostGPUs, r.Usable)
			case ReasonModel:
				d.Models = r.Models
			case ReasonExcluded:
				d.Excluded = strings.Join(r.Models, ", ")
			case ReasonNotMPS:
				d.NeedMPS = max(d.NeedMPS, r.Needed)
				d.MostMPS = max(d.MostMPS, r.Usable)
			}
		}
	}
	return d
}

// String renders the diagnosis like kube-scheduler's FitError, with the
// numbers that matter: "0/12 nodes are available: 8 InsufficientGPUMemory,
// 4 InsufficientCPU; largest free share on any GPU is 3000 MiB, pod needs
// 3500 MiB."
func (d Diagnosis) String() string {
	type kv struct {
		r Reason
		n int
	}
	rs := make([]kv, 0, len(d.ByReason))
	for r, n := range d.ByReason {
		rs = append(rs, kv{r, n})
	}
	slices.SortFunc(rs, func(a, b kv) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(string(a.r), string(b.r))
	})
	parts := make([]string, 0, len(rs))
	for _, x := range rs {
		parts = append(parts, fmt.Sprintf("%d %s", x.n, x.r))
	}
	msg := fmt.Sprintf("0/%d nodes are available: %s", d.Nodes, strings.Join(parts, ", "))
	if detail := d.Detail(); detail != "" {
		msg += "; " + detail
	}
	return msg + "."
}

// Detail is the numbers part of the diagnosis, e.g. "largest free share
// on any GPU is 3000 MiB, pod needs 3500 MiB", "a container needs 4 GPUs,
// the most healthy GPUs any node has is 2", "pod allows GPU models NVIDIA A100", "a
// container needs 1 GPUs under MPS, the most any node has is 0"; "" when
// no node was short of GPU memory, GPUs, a model or MPS.
func (d Diagnosis) Detail() string {
	var parts []string
	kept := d.ByReason[ReasonGPUSpare]
	if kept > 0 {
		parts = append(parts, fmt.Sprintf("idle GPUs on %d node(s) are kept for the whole-GPU pods expected (workload.keepIdleGPUs): "+
			"the pod waits for a partly used GPU with room, or until fewer whole-GPU pods are expected than idle GPUs are left", kept))
	}
	if d.NeedMiB > 0 {
		where := "any GPU"
		if kept > 0 {
			where = "any GPU not kept"
		}
		parts = append(parts, fmt.Sprintf("largest free share on %s is %d MiB, pod needs %d MiB", where, d.LargestFreeMiB, d.NeedMiB))
	}
	if d.NeedGPUs > 0 {
		parts = append(parts, fmt.Sprintf("a container needs %d GPUs, the most healthy GPUs any node has is %d", d.NeedGPUs, d.MostGPUs))
	}
	if len(d.Models) > 0 {
		parts = append(parts, "pod allows GPU models "+strings.Join(d.Models, ", "))
	}
	if d.Excluded != "" {
		parts = append(parts, "the pod's annotations exclude every GPU ("+d.Excluded+")")
	}
	if d.NeedMPS > 0 {
		parts = append(parts, fmt.Sprintf("a container needs %d GPUs under MPS, the most any node has is %d", d.NeedMPS, d.MostMPS))
	}
	return strings.Join(parts, "; ")
}
