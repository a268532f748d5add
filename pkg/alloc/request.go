package alloc

import (
	"errors"
	"fmt"
	"slices"
)

// ContainerRequest is the GPU request of one container.
//
// A shared request asks Count GPUs (default 1), each with MemoryMiB/Count
// memory (rounded up), or MemoryPercent of its memory, and Compute
// percent. Either amount may be zero, not both: aliyun.com/gpu-mem books
// memory only, a bare gpu-core books compute only. An exclusive request
// asks Count whole, otherwise idle GPUs.
type ContainerRequest struct {
	Name string
	// MemoryMiB is the total over the container's GPUs.
	MemoryMiB int64
	// MemoryPercent, instead of MemoryMiB, asks a percent of the memory
	// of each of the container's GPUs, whatever its size (HAMi's
	// nvidia.com/gpumem-percentage): ⌊memory·MemoryPercent/100⌋ MiB of
	// the GPU it lands on.
	MemoryPercent int64
	// Compute is the percent of each GPU, for shared requests.
	Compute   int64
	Count     int
	Exclusive bool
	// Models restricts the GPU models; empty allows any.
	Models []string
	// Filter, if set, narrows the GPUs further (HAMi's annotations).
	Filter *Filter
	// MPS asks for GPUs under NVIDIA MPS (keti.com/mpsgpu): the
	// container runs as an MPS client, so only GPUs that run MPS take it.
	MPS bool
}

// Demand is what a request needs from each of its GPUs.
type Demand struct {
	MemoryMiB int64
	// MemoryPercent asks that percent of each GPU's memory instead.
	MemoryPercent int64
	Compute       int64
	Exclusive     bool
	Models        []string
	Filter        *Filter
	MPS           bool
}

// PerGPU returns the request's per-GPU demand.
func (r *ContainerRequest) PerGPU() Demand {
	n := int64(max(r.Count, 1))
	return Demand{
		MemoryMiB:     (r.MemoryMiB + n - 1) / n,
		MemoryPercent: r.MemoryPercent,
		Compute:       r.Compute,
		Exclusive:     r.Exclusive,
		Models:        r.Models,
		Filter:        r.Filter,
		MPS:           r.MPS,
	}
}

// memoryOn is the memory d books on GPU g, for a shared demand.
func (d *Demand) memoryOn(g *GPU) int64 {
	if d.MemoryPercent > 0 {
		return PercentOf(g.MemoryMiB, d.MemoryPercent)
	}
	return d.MemoryMiB
}

// PercentOf is percent of a GPU of mib MiB, as a MemoryPercent demand
// books it: rounded down, as HAMi does, and at least 1 MiB.
func PercentOf(mib, percent int64) int64 {
	return max(mib*percent/100, 1)
}

// MaxCount is the most GPUs one request may ask: far past any node, and
// low enough that what a request charges (pkg/quota) cannot overflow.
const MaxCount = 1024

// GPUCount returns how many GPUs the request needs.
func (r *ContainerRequest) GPUCount() int { return max(r.Count, 1) }

// Validate reports a request the core cannot place on any GPU.
func (r *ContainerRequest) Validate() error {
	switch {
	case r.Count < 0:
		return fmt.Errorf("container %q: %w: gpu count %d is negative", r.Name, ErrInvalidRequest, r.Count)
	case r.Count > MaxCount:
		return fmt.Errorf("container %q: %w: gpu count %d is more than %d", r.Name, ErrInvalidRequest, r.Count, MaxCount)
	case r.MemoryMiB < 0 || r.Compute < 0 || r.MemoryPercent < 0:
		return fmt.Errorf("container %q: %w: negative GPU memory or compute", r.Name, ErrInvalidRequest)
	case r.MemoryPercent > 100:
		return fmt.Errorf("container %q: %w: memory %d percent of each GPU is more than 100 percent", r.Name, ErrInvalidRequest, r.MemoryPercent)
	case r.MemoryPercent > 0 && r.MemoryMiB > 0:
		return fmt.Errorf("container %q: %w: both MiB and a percent of GPU memory; ask one", r.Name, ErrInvalidRequest)
	case r.Exclusive && r.MPS:
		return fmt.Errorf("container %q: %w: an MPS request shares its GPUs, it cannot be exclusive", r.Name, ErrInvalidRequest)
	case r.Exclusive && (r.MemoryMiB != 0 || r.Compute != 0 || r.MemoryPercent != 0):
		return fmt.Errorf("container %q: %w: a whole-GPU request carries no memory or compute share", r.Name, ErrInvalidRequest)
	case !r.Exclusive && r.MemoryMiB == 0 && r.Compute == 0 && r.MemoryPercent == 0:
		return fmt.Errorf("container %q: %w: a shared GPU request needs memory or compute", r.Name, ErrInvalidRequest)
	case r.Compute > FullCompute:
		return fmt.Errorf("container %q: %w: compute %d percent of one GPU is more than %d percent", r.Name, ErrInvalidRequest, r.Compute, FullCompute)
	}
	return nil
}

// ContainerKind says when a container runs, which decides how its GPU
// usage adds up in the pod (Kubernetes' rule for init containers).
type ContainerKind int

const (
	// App containers run together; their usage adds up.
	App ContainerKind = iota
	// Init containers run one at a time before the app containers.
	Init
	// Sidecar containers are restartable init containers: they start in
	// order among the init containers and keep running with the app.
	Sidecar
)

func (k ContainerKind) String() string {
	switch k {
	case Init:
		return "init"
	case Sidecar:
		return "sidecar"
	default:
		return "app"
	}
}

// PodContainer is one GPU-requesting container of a pod.
type PodContainer struct {
	ContainerRequest
	Kind ContainerKind
}

// PodRequest is everything a pod asks of a node. Containers keep the pod
// spec's order: init and sidecar containers in their declared order, then
// app containers.
type PodRequest struct {
	// Key identifies the pod (namespace/name); it seeds tie-breaks.
	Key        string
	CPUMilli   int64
	MemoryMiB  int64
	Containers []PodContainer
}

// Validate checks every container.
func (p *PodRequest) Validate() error {
	if p.CPUMilli < 0 || p.MemoryMiB < 0 {
		return fmt.Errorf("pod %q: %w: negative CPU or memory", p.Key, ErrInvalidRequest)
	}
	errs := make([]error, 0, len(p.Containers))
	for i := range p.Containers {
		errs = append(errs, p.Containers[i].Validate())
	}
	return errors.Join(errs...)
}

// GPUs reports whether the pod asks for any GPU.
func (p *PodRequest) GPUs() bool { return len(p.Containers) > 0 }

// Allows reports whether g is a GPU d may ever take, whatever its health
// and what is booked on it: of an allowed model, running MPS if d asks for
// it, and passing d's filter.
func (d *Demand) Allows(g *GPU) bool {
	return allows(d.Models, g.Model) && (!d.MPS || g.MPS) && d.Filter.Allows(g)
}

// allows reports whether model is allowed by the list (empty allows all).
func allows(models []string, model string) bool {
	return len(models) == 0 || slices.Contains(models, model)
}

// ErrInvalidRequest marks a request no GPU could ever satisfy as asked.
var ErrInvalidRequest = errors.New("invalid GPU request")
