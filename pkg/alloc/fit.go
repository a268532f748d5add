package alloc

import (
	"fmt"
	"strings"
)

// Reason says why a node or GPU cannot take a request.
type Reason string

// Reasons, from the node down to one GPU.
const (
	ReasonCPU          Reason = "InsufficientCPU"
	ReasonMemory       Reason = "InsufficientMemory"
	ReasonWholeCard    Reason = "WholeCardOnly"
	ReasonGPUCount     Reason = "TooFewGPUs"
	ReasonUnhealthy    Reason = "GPUUnhealthy"
	ReasonModel        Reason = "GPUModelNotAllowed"
	ReasonExcluded     Reason = "GPUExcluded"
	ReasonNotMPS       Reason = "GPUNotMPS"
	ReasonGPUTooSmall  Reason = "GPUTooSmall"
	ReasonGPUMemory    Reason = "InsufficientGPUMemory"
	ReasonGPUCompute   Reason = "InsufficientGPUCompute"
	ReasonGPUNotIdle   Reason = "GPUNotIdle"
	ReasonGPUSpare     Reason = "GPUKeptSpare"
	ReasonNodeRejected Reason = "NodeRejected"
)

// GPUReject says why one GPU cannot take a container's per-GPU demand.
// Requested, Free and Capacity are in the reason's unit: MiB for memory,
// percent for compute, zero otherwise.
type GPUReject struct {
	GPU       int
	Reason    Reason
	Requested int64
	Free      int64
	Capacity  int64
}

// Insufficiency is one reason a node cannot take a pod. For CPU and memory
// the amounts are the pod's and node's; for a GPU reason they are the
// container's per-GPU demand and the largest free amount and capacity on
// any GPU of the node that it could otherwise use. Needed and Usable count
// GPUs.
type Insufficiency struct {
	Reason    Reason
	Container string
	Requested int64
	Free      int64
	Capacity  int64
	Needed    int
	Usable    int
	// Models are the container's allowed GPU models, for ReasonModel.
	Models []string
}

// Unfit explains why a pod does not fit a node; it is data, formatted only
// when asked.
type Unfit struct {
	Node    string
	Reasons []Insufficiency
	// GPUs holds, for the first container that did not fit, why each GPU
	// was rejected.
	GPUs []GPUReject
}

// Resolvable reports whether evicting pods from the node could make room:
// false when a reason lies in the node itself (too few GPUs, or too few
// healthy, of an allowed model, under MPS or large enough, whole cards
// only), which preemption cannot change.
func (u *Unfit) Resolvable() bool {
	for _, r := range u.Reasons {
		switch r.Reason {
		case ReasonWholeCard, ReasonGPUCount, ReasonUnhealthy, ReasonModel, ReasonExcluded, ReasonNotMPS, ReasonGPUTooSmall, ReasonNodeRejected:
			return false
		}
	}
	return true
}

func (u *Unfit) Error() string {
	parts := make([]string, 0, len(u.Reasons))
	for _, r := range u.Reasons {
		parts = append(parts, r.String())
	}
	return fmt.Sprintf("node %s: %s", u.Node, strings.Join(parts, "; "))
}

func (r Insufficiency) String() string {
	var who string
	if r.Container != "" {
		who = fmt.Sprintf("container %s: ", r.Container)
	}
	switch r.Reason {
	case ReasonCPU:
		return fmt.Sprintf("%sinsufficient CPU: pod needs %dm, %dm of %dm free", who, r.Requested, r.Free, r.Capacity)
	case ReasonMemory:
		return fmt.Sprintf("%sinsufficient memory: pod needs %d MiB, %d MiB of %d MiB free", who, r.Requested, r.Free, r.Capacity)
	case ReasonGPUMemory:
		return fmt.Sprintf("%sneeds %d GPU(s) with %d MiB free, %d usable; largest free share on any GPU is %d MiB (of %d MiB)",
			who, r.Needed, r.Requested, r.Usable, r.Free, r.Capacity)
	case ReasonGPUCompute:
		return fmt.Sprintf("%sneeds %d GPU(s) with %d%% compute free, %d usable; most free on any GPU is %d%%",
			who, r.Needed, r.Requested, r.Usable, r.Free)
	case ReasonGPUTooSmall:
		return fmt.Sprintf("%sneeds %d MiB on each GPU, largest allowed GPU has %d MiB", who, r.Requested, r.Capacity)
	case ReasonGPUNotIdle:
		return fmt.Sprintf("%sneeds %d whole idle GPU(s), %d idle", who, r.Needed, r.Usable)
	case ReasonGPUSpare:
		return fmt.Sprintf("%sneeds %d GPU(s) with room for its share, %d usable: the node's idle GPUs, and the CPU that feeds them, are kept spare for pods that ask whole GPUs, which the cluster is short of", who, r.Needed, r.Usable)
	case ReasonGPUCount:
		return fmt.Sprintf("%sneeds %d GPU(s), node has %d", who, r.Needed, r.Usable)
	case ReasonWholeCard:
		return who + "node hands out whole GPUs only"
	case ReasonModel:
		return fmt.Sprintf("%sno GPU of an allowed model (%s)", who, strings.Join(r.Models, ", "))
	case ReasonExcluded:
		return fmt.Sprintf("%sthe pod's annotations exclude every GPU (%s)", who, strings.Join(r.Models, ", "))
	case ReasonUnhealthy:
		return fmt.Sprintf("%sneeds %d GPU(s), %d healthy", who, r.Needed, r.Usable)
	case ReasonNotMPS:
		return fmt.Sprintf("%sneeds %d GPU(s) under MPS, node has %d (gpushare-node --mps)", who, r.Needed, r.Usable)
	default:
		return who + string(r.Reason)
	}
}

// checkGPU reports whether GPU i of s can take demand d; if not, why.
func checkGPU(s *NodeState, i int, d *Demand) (GPUReject, bool) {
	g := &s.Node.GPUs[i]
	rej := GPUReject{GPU: i}
	switch {
	case !g.Healthy:
		rej.Reason = ReasonUnhealthy
	case !allows(d.Models, g.Model):
		rej.Reason = ReasonModel
	case !d.Filter.Allows(g):
		rej.Reason = ReasonExcluded
	case d.MPS && !g.MPS:
		rej.Reason = ReasonNotMPS
	case d.Exclusive:
		if s.GPUs[i] != (Usage{}) {
			rej.Reason = ReasonGPUNotIdle
		}
	case d.memoryOn(g) > g.MemoryMiB:
		rej = GPUReject{GPU: i, Reason: ReasonGPUTooSmall, Requested: d.memoryOn(g), Capacity: g.MemoryMiB}
	default:
		f := s.Free(i)
		if m := d.memoryOn(g); f.MemoryMiB < m {
			rej = GPUReject{GPU: i, Reason: ReasonGPUMemory, Requested: m, Free: f.MemoryMiB, Capacity: g.MemoryMiB}
		} else if f.Compute < d.Compute {
			rej = GPUReject{GPU: i, Reason: ReasonGPUCompute, Requested: d.Compute, Free: f.Compute, Capacity: g.ComputeCapacity()}
		}
	}
	return rej, rej.Reason == ""
}

// fits is checkGPU without the explanation, for hot paths.
func fits(s *NodeState, i int, d *Demand) bool {
	return fitsUsage(&s.Node.GPUs[i], s.GPUs[i], d)
}

// fitsUsage reports whether GPU g with usage u can take demand d.
func fitsUsage(g *GPU, u Usage, d *Demand) bool {
	if !admits(g, d) {
		return false
	}
	if d.Exclusive {
		return u == Usage{}
	}
	return u.MemoryMiB+d.memoryOn(g) <= g.MemoryMiB && u.Compute+d.Compute <= g.ComputeCapacity()
}

// admits reports whether g may take d at all, whatever is booked on it:
// it is healthy, of an allowed model, and runs MPS if d asks for it.
func admits(g *GPU, d *Demand) bool {
	return g.Healthy && allows(d.Models, g.Model) && (!d.MPS || g.MPS) && d.Filter.Allows(g)
}

// shareOf is FreeShare for GPU g with usage u.
func shareOf(g *GPU, u Usage) int64 {
	if !g.Healthy {
		return 0
	}
	return min((g.MemoryMiB-u.MemoryMiB)*1000/g.MemoryMiB, (g.ComputeCapacity()-u.Compute)*1000/g.ComputeCapacity())
}

// containerUnfit summarises per-GPU rejections into one reason. It names
// the shortage a user can act on: not enough free memory or compute beats
// "not idle", which beats a GPU too small, no MPS, a model or health.
// Free and Capacity are the largest on any GPU the demand admits; for
// ReasonNotMPS, Usable counts the node's MPS GPUs.
func containerUnfit(s *NodeState, name string, need, usable int, d *Demand, rejects []GPUReject) Insufficiency {
	in := Insufficiency{Container: name, Needed: need, Usable: usable}
	if d.MPS {
		// Only the node's MPS GPUs count: a node with fewer than the
		// container needs is short of MPS GPUs, however many others it
		// has.
		mps := 0
		for i := range s.Node.GPUs {
			if s.Node.GPUs[i].MPS {
				mps++
			}
		}
		if mps < need {
			in.Reason, in.Usable = ReasonNotMPS, mps
			return in
		}
	}
	if len(s.Node.GPUs) < need {
		// Usable counts the healthy GPUs: a withdrawn GPU is no GPU to
		// the pod.
		in.Reason, in.Usable = ReasonGPUCount, 0
		for i := range s.Node.GPUs {
			if s.Node.GPUs[i].Healthy {
				in.Usable++
			}
		}
		return in
	}
	seen := make(map[Reason]bool, 4)
	for _, r := range rejects {
		seen[r.Reason] = true
	}
	for _, reason := range []Reason{ReasonGPUSpare, ReasonGPUMemory, ReasonGPUCompute, ReasonGPUNotIdle, ReasonGPUTooSmall, ReasonNotMPS, ReasonModel, ReasonExcluded, ReasonUnhealthy} {
		if seen[reason] {
			in.Reason = reason
			break
		}
	}
	switch in.Reason {
	case ReasonModel:
		in.Models = d.Models
	case ReasonExcluded:
		in.Models = []string{d.Filter.String()}
	case ReasonNotMPS:
		in.Usable = 0
		for i := range s.Node.GPUs {
			if s.Node.GPUs[i].MPS {
				in.Usable++
			}
		}
	}
	for i := range s.Node.GPUs {
		g := &s.Node.GPUs[i]
		if !admits(g, d) {
			continue
		}
		f := s.Free(i)
		switch in.Reason {
		case ReasonGPUMemory, ReasonGPUTooSmall:
			in.Requested = max(in.Requested, d.memoryOn(g))
			in.Free, in.Capacity = max(in.Free, f.MemoryMiB), max(in.Capacity, g.MemoryMiB)
		case ReasonGPUCompute:
			in.Requested = d.Compute
			in.Free, in.Capacity = max(in.Free, f.Compute), max(in.Capacity, g.ComputeCapacity())
		}
	}
	return in
}
