// Package claim reads ResourceClaims for gpushare's DRA devices: what a
// claim asks of them, as the core's container requests, and what an
// allocated claim holds of each GPU. The scheduler places and books
// claims with it; it imports no kubelet code.
package claim

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// Driver is gpushare's DRA driver: the devices' driver and pool owner.
const Driver = "gpu.gpushare.io"

// The DeviceClasses of gpushare's devices that the chart installs:
// requests that name them are placed by gpushare's policy. Class is a
// share of any GPU, MPSClass a share of a GPU under NVIDIA MPS.
const (
	Class    = "gpu.gpushare.io"
	MPSClass = "gpu-mps.gpushare.io"
)

// The device capacities a request consumes part of.
const (
	Memory  resourceapi.QualifiedName = "memory"
	Compute resourceapi.QualifiedName = "compute"
)

// DevicePrefix starts each device's name; the GPU's index follows.
const DevicePrefix = "gpu-"

// DeviceIndex returns the GPU index of device name, or false when name is
// not one of gpushare's device names.
func DeviceIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, DevicePrefix)
	if !ok || s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 {
		return 0, false
	}
	return i, true
}

// ErrUnsupported marks a request of gpushare's class that the policy
// cannot place (a prioritized list, or all devices): DRA's allocator
// places it alone.
var ErrUnsupported = errors.New("request not placed by gpushare's policy")

// The most one device request may ask, so that what a claim charges
// (memory times count) cannot overflow: far past any GPU and any node.
const (
	maxCount  = 1024
	maxMemory = 1 << 50
)

// Requests returns what claim c asks of gpushare's devices, one container
// request per device request of class Class or MPSClass (on MPS GPUs
// only), named "claim/<claim>/<request>":
// count devices, each with the memory (MiB, rounded up) and compute
// (percent) its capacity requests name; a request that names no memory
// takes its GPUs whole. Requests of other classes are left out. It
// returns ErrUnsupported for a request of the class it cannot express.
func Requests(c *resourceapi.ResourceClaim) ([]alloc.ContainerRequest, error) {
	var out []alloc.ContainerRequest
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly == nil {
			for _, s := range r.FirstAvailable {
				if s.DeviceClassName == Class || s.DeviceClassName == MPSClass {
					return nil, fmt.Errorf("claim %s request %s: %w: firstAvailable", c.Name, r.Name, ErrUnsupported)
				}
			}
			continue
		}
		e := r.Exactly
		if e.DeviceClassName != Class && e.DeviceClassName != MPSClass {
			continue
		}
		if e.AllocationMode == resourceapi.DeviceAllocationModeAll {
			return nil, fmt.Errorf("claim %s request %s: %w: allocationMode All", c.Name, r.Name, ErrUnsupported)
		}
		if e.Count > maxCount {
			return nil, fmt.Errorf("claim %s request %s: count %d is more than the %d devices one request may take", c.Name, r.Name, e.Count, maxCount)
		}
		count := int(e.Count)
		if count <= 0 {
			count = 1
		}
		cr := alloc.ContainerRequest{Name: "claim/" + c.Name + "/" + r.Name, Count: count, MPS: e.DeviceClassName == MPSClass}
		var mem, compute int64
		if e.Capacity != nil {
			if q, ok := e.Capacity.Requests[Memory]; ok {
				b := q.Value()
				if b <= 0 || b > maxMemory {
					return nil, fmt.Errorf("claim %s request %s: memory %s is not from 1 byte to 1 PiB", c.Name, r.Name, q.String())
				}
				mem = (b + 1<<20 - 1) >> 20
			}
			if q, ok := e.Capacity.Requests[Compute]; ok {
				v := q.Value()
				if v < 0 || v > alloc.FullCompute {
					return nil, fmt.Errorf("claim %s request %s: compute %s is not a percent from 0 to 100", c.Name, r.Name, q.String())
				}
				compute = v
			}
		}
		if mem == 0 {
			cr.Exclusive = true
		} else {
			cr.MemoryMiB, cr.Compute = mem*int64(count), compute
		}
		out = append(out, cr)
	}
	return out, nil
}

// Asks reports whether claim c asks for any of gpushare's devices, by
// any request of its spec: exactly, or among firstAvailable's
// subrequests, in any allocation mode. It is true of an allocated claim
// too: a claim's spec does not change.
func Asks(c *resourceapi.ResourceClaim) bool {
	ours := func(class string) bool { return class == Class || class == MPSClass }
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil && ours(r.Exactly.DeviceClassName) {
			return true
		}
		for _, s := range r.FirstAvailable {
			if ours(s.DeviceClassName) {
				return true
			}
		}
	}
	return false
}

// GPU is what an allocated claim holds of one of gpushare's GPUs.
type GPU struct {
	Index int
	// MemoryMiB and Compute are what it consumes; Whole is set where it
	// consumes none in parts (the device taken whole), and then they are
	// zero.
	MemoryMiB int64
	Compute   int64
	Whole     bool
}

// Held returns the node and the GPUs claim c's allocation holds of
// gpushare's devices, summed per GPU; node is "" when c is not allocated
// or holds none of them (admin access holds none). It refuses results it cannot read (a device name
// or consumption that gpushare's devices never have).
func Held(c *resourceapi.ResourceClaim) (node string, gpus []GPU, err error) {
	if c.Status.Allocation == nil {
		return "", nil, nil
	}
	at := map[int]int{}
	for _, r := range c.Status.Allocation.Devices.Results {
		// Admin access consumes nothing: DRA's allocator does not count
		// it against the device.
		if r.Driver != Driver || r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		if node != "" && r.Pool != node {
			return "", nil, fmt.Errorf("claim %s holds devices of pools %s and %s", c.Name, node, r.Pool)
		}
		node = r.Pool
		i, ok := DeviceIndex(r.Device)
		if !ok {
			return "", nil, fmt.Errorf("claim %s holds device %s/%s, not one of %s's", c.Name, r.Pool, r.Device, Driver)
		}
		g := GPU{Index: i, Whole: r.ConsumedCapacity == nil}
		if q, ok := r.ConsumedCapacity[Memory]; ok {
			b := q.Value()
			if b < 0 {
				return "", nil, fmt.Errorf("claim %s device %s: negative memory %s", c.Name, r.Device, q.String())
			}
			g.MemoryMiB = (b + 1<<20 - 1) >> 20
		}
		if q, ok := r.ConsumedCapacity[Compute]; ok {
			if v := q.Value(); v >= 0 && v <= alloc.FullCompute {
				g.Compute = v
			} else {
				return "", nil, fmt.Errorf("claim %s device %s: compute %s is not a percent", c.Name, r.Device, q.String())
			}
		}
		if k, seen := at[i]; seen {
			gpus[k].MemoryMiB += g.MemoryMiB
			gpus[k].Compute += g.Compute
			gpus[k].Whole = gpus[k].Whole || g.Whole
			continue
		}
		at[i] = len(gpus)
		gpus = append(gpus, g)
	}
	return node, gpus, nil
}

// Placement is what gpus, held by claim name, book on node, by GPU
// index: a GPU taken whole books all its memory and compute. It refuses
// an index the node does not list.
func Placement(name string, gpus []GPU, node *alloc.Node) (*alloc.Placement, error) {
	pl := &alloc.Placement{Node: node.Name}
	for _, g := range gpus {
		if g.Index >= len(node.GPUs) {
			return nil, fmt.Errorf("%s holds GPU %d of node %s, which lists %d", name, g.Index, node.Name, len(node.GPUs))
		}
		gpu := node.GPUs[g.Index]
		u := alloc.Usage{MemoryMiB: g.MemoryMiB, Compute: g.Compute}
		if g.Whole {
			u = alloc.Usage{MemoryMiB: gpu.MemoryMiB, Compute: gpu.ComputeCapacity()}
		}
		pl.Booked = append(pl.Booked, alloc.Assignment{GPU: g.Index, UUID: gpu.UUID, Usage: u})
	}
	slices.SortFunc(pl.Booked, func(a, b alloc.Assignment) int { return a.GPU - b.GPU })
	return pl, nil
}

// Of returns the ResourceClaims of pod that lister has: its own claims
// and those generated for it from templates, once named in its status.
func Of(pod *corev1.Pod, lister resourcelisters.ResourceClaimLister) []*resourceapi.ResourceClaim {
	if lister == nil {
		return nil
	}
	var out []*resourceapi.ResourceClaim
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		if rc, err := lister.ResourceClaims(pod.Namespace).Get(*name); err == nil {
			out = append(out, rc)
		}
	}
	return out
}

// PodAsks reports whether any of pod's ResourceClaims asks for
// gpushare's devices (Asks), allocated or not, in whatever form.
func PodAsks(pod *corev1.Pod, lister resourcelisters.ResourceClaimLister) bool {
	return slices.ContainsFunc(Of(pod, lister), Asks)
}
