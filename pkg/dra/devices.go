// Package dra describes a node's GPUs to Kubernetes' Dynamic Resource
// Allocation as devices of the driver gpu.gpushare.io: one device per
// GPU, which several claims share (allowMultipleAllocations), each
// consuming part of its memory (MiB) and compute (percent of its SMs).
// It also reads back what an allocation consumed. The kubelet plugin
// that publishes these devices and prepares claims is built on it.
package dra

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// Driver is the DRA driver's name: the devices' driver, and the domain of
// their attributes and capacities.
const Driver = claim.Driver

// The capacities of each device a claim's request consumes part of.
const (
	// Memory is the GPU's usable memory (after the driver's reserve), in
	// binary units with a granularity of 1 MiB.
	Memory = claim.Memory
	// Compute is the share of the GPU's SMs in percent: 100 is the GPU.
	Compute = claim.Compute
)

// The devices' attributes, for the selectors users write
// (device.attributes["gpu.gpushare.io"].model == "Tesla T4").
const (
	AttrModel       resourceapi.QualifiedName = "model"
	AttrUUID        resourceapi.QualifiedName = "uuid"
	AttrIndex       resourceapi.QualifiedName = "index"
	AttrMemoryMiB   resourceapi.QualifiedName = "memoryMiB"
	AttrNUMANode    resourceapi.QualifiedName = "numaNode"
	AttrNVLinkPeers resourceapi.QualifiedName = "nvlinkPeers"
	AttrMPS         resourceapi.QualifiedName = "mps"
	AttrWholeCard   resourceapi.QualifiedName = "wholeCard"
)

// Options are how the node shares its GPUs.
type Options struct {
	// WholeCard: the node hands out whole GPUs only. Each device then
	// takes one allocation, and no capacity is consumed in parts.
	WholeCard bool
	// MPS: the node runs NVIDIA MPS, and each claim's compute share is
	// enforced as its MPS active thread percentage.
	MPS bool
}

// DeviceName is the device that stands for the GPU of driver index i.
func DeviceName(index int) string { return claim.DevicePrefix + strconv.Itoa(index) }

// Devices describes gpus as DRA devices. A GPU that is not healthy is
// left out (withdrawn): no new claim gets it, and the claims that hold it
// keep their allocation. Devices are in the order of the GPUs' indexes.
func Devices(gpus []gpu.Device, o Options) []resourceapi.Device {
	return DevicesBeside(gpus, o, nil)
}

// DevicesBeside describes gpus as Devices does, less what booked (by
// UUID) holds of each: the pods that book the GPUs through extended
// resources. The allocator then counts claims against what the pods
// leave, and DRA's first fit never picks a GPU the pods fill. A GPU with
// less than 1 MiB left, or a whole-card GPU a pod holds, is withdrawn
// until the pods go.
func DevicesBeside(gpus []gpu.Device, o Options, booked map[string]Share) []resourceapi.Device {
	var out []resourceapi.Device
	for _, g := range sortedByIndex(gpus) {
		if !g.Healthy {
			continue
		}
		b := booked[g.UUID]
		free := Share{MemoryMiB: usableMiB(g) - b.MemoryMiB, ComputePercent: max(100-b.ComputePercent, 0)}
		if free.MemoryMiB < 1 || o.WholeCard && b != (Share{}) {
			continue
		}
		out = append(out, device(g, o, free))
	}
	return out
}

func sortedByIndex(gpus []gpu.Device) []gpu.Device {
	s := slices.Clone(gpus)
	slices.SortFunc(s, func(a, b gpu.Device) int { return a.Index - b.Index })
	return s
}

// device describes g with free of it for claims: memoryMiB says the
// GPU's usable memory, the capacities what claims may consume.
func device(g gpu.Device, o Options, free Share) resourceapi.Device {
	mem := free.MemoryMiB
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrModel:     {StringValue: ptr.To(g.Model)},
		AttrUUID:      {StringValue: ptr.To(g.UUID)},
		AttrIndex:     {IntValue: ptr.To(int64(g.Index))},
		AttrMemoryMiB: {IntValue: ptr.To(usableMiB(g))},
		AttrMPS:       {BoolValue: ptr.To(o.MPS)},
		AttrWholeCard: {BoolValue: ptr.To(o.WholeCard)},
	}
	if g.NUMANode >= 0 {
		attrs[AttrNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.NUMANode))}
	}
	if len(g.NVLinkPeers) > 0 {
		peers := make([]string, len(g.NVLinkPeers))
		for i, p := range slices.Sorted(slices.Values(g.NVLinkPeers)) {
			peers[i] = strconv.Itoa(p)
		}
		// A string of indexes ("1,2,3"), matched in CEL with
		// .split(",") or contains.
		attrs[AttrNVLinkPeers] = resourceapi.DeviceAttribute{StringValue: ptr.To(strings.Join(peers, ","))}
	}
	d := resourceapi.Device{
		Name:       DeviceName(g.Index),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			Memory:  {Value: mib(mem)},
			Compute: {Value: *k8sresource.NewQuantity(free.ComputePercent, k8sresource.DecimalSI)},
		},
	}
	if o.WholeCard {
		return d
	}
	// Shared: a request that names no memory takes all of it, so that a
	// claim written for a whole device keeps one to itself. Compute is
	// consumed only where a request names it, as gpushare.io/gpu-core
	// is: a memory share leaves the SMs to the others (0, no limit).
	d.AllowMultipleAllocations = ptr.To(true)
	d.Capacity[Memory] = resourceapi.DeviceCapacity{Value: mib(mem), RequestPolicy: &resourceapi.CapacityRequestPolicy{
		Default:    ptr.To(mib(mem)),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(mib(1)), Max: ptr.To(mib(mem)), Step: ptr.To(mib(1))},
	}}
	pct := func(v int64) *k8sresource.Quantity { return k8sresource.NewQuantity(v, k8sresource.DecimalSI) }
	d.Capacity[Compute] = resourceapi.DeviceCapacity{Value: *pct(free.ComputePercent), RequestPolicy: &resourceapi.CapacityRequestPolicy{
		Default:    pct(0),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: pct(0), Max: pct(free.ComputePercent), Step: pct(1)},
	}}
	return d
}

// usableMiB is the memory a claim can consume: the usable memory where
// the driver reports it.
func usableMiB(g gpu.Device) int64 {
	if g.UsableMemoryMiB > 0 {
		return g.UsableMemoryMiB
	}
	return g.MemoryMiB
}

func mib(n int64) k8sresource.Quantity { return *k8sresource.NewQuantity(n<<20, k8sresource.BinarySI) }

// Share is what one allocation of a device consumes.
type Share struct {
	// MemoryMiB is the GPU memory the claim may use.
	MemoryMiB int64
	// ComputePercent is its share of the GPU's SMs; 0 where it asked for
	// none (no compute limit).
	ComputePercent int64
}

func (s Share) add(o Share) Share {
	return Share{MemoryMiB: s.MemoryMiB + o.MemoryMiB, ComputePercent: s.ComputePercent + o.ComputePercent}
}

// Consumed returns what allocation result r consumes of GPU g: the
// capacity it names (no compute where it names memory only), the whole
// GPU where it names none (an exclusive allocation: a whole-card device).
// An admin-access result consumes nothing: DRA's allocator does not
// count it against the device, so neither does gpushare.
// It refuses a result for another driver or device, and a consumption
// that is not a whole number of MiB or percent or exceeds the GPU.
func Consumed(r resourceapi.DeviceRequestAllocationResult, g gpu.Device) (Share, error) {
	if r.Driver != Driver {
		return Share{}, fmt.Errorf("device %s/%s is driver %q's, not %s", r.Pool, r.Device, r.Driver, Driver)
	}
	if r.Device != DeviceName(g.Index) {
		return Share{}, fmt.Errorf("allocation of device %s read against GPU %d (%s)", r.Device, g.Index, g.UUID)
	}
	if r.AdminAccess != nil && *r.AdminAccess {
		return Share{}, nil
	}
	s := Share{MemoryMiB: usableMiB(g), ComputePercent: 100}
	if r.ConsumedCapacity != nil {
		s.ComputePercent = 0
	}
	if q, ok := r.ConsumedCapacity[Memory]; ok {
		b := q.Value()
		if b <= 0 || b%(1<<20) != 0 || b>>20 > usableMiB(g) {
			return Share{}, fmt.Errorf("device %s: consumed memory %s is not a whole number of MiB from 1 to %d", r.Device, q.String(), usableMiB(g))
		}
		s.MemoryMiB = b >> 20
	}
	if q, ok := r.ConsumedCapacity[Compute]; ok {
		v, exact := q.AsInt64()
		if !exact || v < 0 || v > 100 {
			return Share{}, fmt.Errorf("device %s: consumed compute %s is not a whole percent from 0 to 100", r.Device, q.String())
		}
		s.ComputePercent = v
	}
	return s, nil
}
