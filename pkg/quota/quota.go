// Package quota reckons what a pod charges against its namespace's GPU
// quota, in gpushare's units: GPU memory in MiB and GPU compute in percent
// of one GPU, whatever dialect the pod asks in. The resource model
// (pkg/resource) has already turned the dialect into an alloc.PodRequest;
// this package adds the pod's containers up by the rule the booking
// uses (alloc.Booking) and prices what a request leaves to the GPU it
// lands on (whole GPUs, a percent of a GPU's memory) at the largest GPU
// it may land on, so that no placement charges more than was counted.
//
// It imports no Kubernetes package: the webhook (pkg/webhook) writes a
// Charge into the pod as two extended resources, which a ResourceQuota
// then counts.
package quota

import (
	"errors"
	"fmt"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// The extended resources a pod's Charge is written as, on its first app
// container: GPU memory in bytes, GPU compute in percent of one GPU. A
// ResourceQuota bounds them as requests.<name>.
const (
	MemoryResource  = "gpushare.io/quota-memory"
	ComputeResource = "gpushare.io/quota-compute"
)

// Charge is what a pod counts against its namespace's quota.
type Charge struct {
	// MemoryMiB is GPU memory in MiB, summed over the pod's GPUs.
	MemoryMiB int64
	// Compute is GPU compute in percent of one GPU, summed over the pod's
	// GPUs: a whole GPU is 100.
	Compute int64
}

// Zero reports whether c charges nothing.
func (c Charge) Zero() bool { return c == Charge{} }

func (c Charge) add(o Charge) Charge {
	return Charge{MemoryMiB: c.MemoryMiB + o.MemoryMiB, Compute: c.Compute + o.Compute}
}

func (c Charge) max(o Charge) Charge {
	return Charge{MemoryMiB: max(c.MemoryMiB, o.MemoryMiB), Compute: max(c.Compute, o.Compute)}
}

func (c Charge) String() string {
	// No percent sign: kube-scheduler's events take a status message as
	// a format.
	return fmt.Sprintf("%d MiB of GPU memory and %d percent of a GPU's compute", c.MemoryMiB, c.Compute)
}

// ErrUnpriced is a request whose memory depends on the GPU it lands on
// (whole GPUs, a percent of memory) when no GPU in the cluster is one it
// may take: nothing says what it would hold.
var ErrUnpriced = errors.New("no GPU in the cluster is one it may take, so the GPU memory it would hold is unknown")

// Of returns what pod charges: its containers' requests added up as the
// booking adds them (app containers and sidecars together, each init
// container beside the sidecars declared before it, the most of any
// phase), plus claims, requests held for the pod's whole life (its
// ResourceClaims' device requests, from claim.Requests). gpus are the
// cluster's GPUs, which price requests that leave their memory to the
// GPU: at the most memory any GPU the request may take holds (its
// models and MPS; health aside). It returns ErrUnpriced, wrapped
// with the container's name, when no GPU may take such a request.
func Of(pod *alloc.PodRequest, claims []alloc.ContainerRequest, gpus []alloc.GPU) (Charge, error) {
	var running, sidecars, most Charge
	for i := range pod.Containers {
		c := &pod.Containers[i]
		ch, err := container(&c.ContainerRequest, gpus)
		if err != nil {
			return Charge{}, err
		}
		switch c.Kind {
		case alloc.Init:
			most = most.max(sidecars.add(ch))
		case alloc.Sidecar:
			sidecars = sidecars.add(ch)
			running = running.add(ch)
		default:
			running = running.add(ch)
		}
	}
	for i := range claims {
		ch, err := container(&claims[i], gpus)
		if err != nil {
			return Charge{}, err
		}
		running = running.add(ch)
	}
	return most.max(running), nil
}

// container returns what one container request charges.
func container(r *alloc.ContainerRequest, gpus []alloc.GPU) (Charge, error) {
	n := int64(max(r.Count, 1))
	switch {
	case r.Exclusive:
		mib, err := largest(r, gpus)
		if err != nil {
			return Charge{}, err
		}
		return Charge{MemoryMiB: n * mib, Compute: n * alloc.FullCompute}, nil
	case r.MemoryPercent > 0:
		mib, err := largest(r, gpus)
		if err != nil {
			return Charge{}, err
		}
		return Charge{MemoryMiB: n * (mib * r.MemoryPercent / 100), Compute: n * r.Compute}, nil
	default:
		return Charge{MemoryMiB: r.MemoryMiB, Compute: n * r.Compute}, nil
	}
}

// largest returns the most memory of a GPU r may take. Filters (HAMi's,
// by GPU type and UUID) are left out: they only narrow the GPUs, so
// without them the price is the same or higher, never lower, and GPUs
// alike but for their UUID price alike.
func largest(r *alloc.ContainerRequest, gpus []alloc.GPU) (int64, error) {
	d := r.PerGPU()
	d.Filter = nil
	var mib int64
	for i := range gpus {
		if d.Allows(&gpus[i]) {
			mib = max(mib, gpus[i].MemoryMiB)
		}
	}
	if mib == 0 {
		return 0, fmt.Errorf("container %s: %w", r.Name, ErrUnpriced)
	}
	return mib, nil
}
