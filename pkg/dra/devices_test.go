package dra

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/pkg/gpu"
)

func t4(index int) gpu.Device {
	return gpu.Device{Index: index, UUID: "GPU-t4-" + string(rune('a'+index)), Model: "Tesla T4", MemoryMiB: 15360,
		UsableMemoryMiB: 14930, NUMANode: -1, Healthy: true}
}

// Each healthy GPU is one shared device, in index order, whose memory is
// the usable memory in MiB steps and whose compute is 100 percent; a
// request that names no memory takes all of it, and one that names no
// compute takes none. An unhealthy GPU is withdrawn.
func TestDevices(t *testing.T) {
	a, b, sick := t4(1), t4(0), t4(2)
	a.NUMANode, a.NVLinkPeers = 1, []int{3, 0}
	sick.Healthy = false
	devs := Devices([]gpu.Device{a, sick, b}, Options{MPS: true})
	if len(devs) != 2 || devs[0].Name != "gpu-0" || devs[1].Name != "gpu-1" {
		t.Fatalf("devices %v; want gpu-0 and gpu-1, without the unhealthy gpu-2", names(devs))
	}
	d := devs[1]
	if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
		t.Error("a shared GPU's device does not allow multiple allocations")
	}
	mem := d.Capacity[Memory]
	if mem.Value.Value() != 14930<<20 || mem.RequestPolicy == nil || mem.RequestPolicy.Default.Value() != 14930<<20 ||
		mem.RequestPolicy.ValidRange.Step.Value() != 1<<20 || mem.RequestPolicy.ValidRange.Max.Value() != 14930<<20 {
		t.Errorf("memory capacity %+v; want 14930Mi usable, by default all of it, in steps of 1Mi", mem)
	}
	cpu := d.Capacity[Compute]
	if cpu.Value.Value() != 100 || cpu.RequestPolicy.Default.Value() != 0 || cpu.RequestPolicy.ValidRange.Min.Value() != 0 {
		t.Errorf("compute capacity %+v; want 100, by default none of it", cpu)
	}
	want := map[resourceapi.QualifiedName]string{AttrModel: "Tesla T4", AttrUUID: a.UUID, AttrIndex: "1", AttrMemoryMiB: "14930",
		AttrNUMANode: "1", AttrNVLinkPeers: "0,3", AttrMPS: "true", AttrWholeCard: "false"}
	for name, v := range want {
		if got := attr(d.Attributes[name]); got != v {
			t.Errorf("attribute %s = %q; want %q", name, got, v)
		}
	}
	if _, ok := devs[0].Attributes[AttrNUMANode]; ok {
		t.Error("a GPU of unknown NUMA node has a numaNode attribute")
	}
	if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		t.Errorf("%d attributes and capacities; the API takes %d", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
}

// On a whole-card node each device takes one allocation.
func TestDevicesWholeCard(t *testing.T) {
	for _, d := range Devices([]gpu.Device{t4(0)}, Options{WholeCard: true}) {
		if d.AllowMultipleAllocations != nil || d.Capacity[Memory].RequestPolicy != nil || attr(d.Attributes[AttrWholeCard]) != "true" {
			t.Errorf("whole-card device %+v; want one allocation, no request policy, wholeCard true", d)
		}
	}
}

// Consumed reads the MiB and percent an allocation took, the whole GPU
// where it names none, and refuses what no request of ours can consume.
// TestDevicesBeside: what the node's pods book of a GPU is taken off the
// capacity claims may consume (memory, compute and their ranges), its
// memoryMiB attribute still says the GPU's; a GPU the pods fill, and a
// whole-card GPU a pod holds, are withdrawn.
func TestDevicesBeside(t *testing.T) {
	a, b, c := t4(0), t4(1), t4(2)
	booked := map[string]Share{a.UUID: {MemoryMiB: 4000, ComputePercent: 30}, c.UUID: {MemoryMiB: 14930}}
	devs := DevicesBeside([]gpu.Device{a, b, c}, Options{}, booked)
	if len(devs) != 2 || devs[0].Name != "gpu-0" || devs[1].Name != "gpu-1" {
		t.Fatalf("devices %v; want gpu-0 and gpu-1, without gpu-2 that pods fill", names(devs))
	}
	mem, cpu := devs[0].Capacity[Memory], devs[0].Capacity[Compute]
	if mem.Value.Value() != 10930<<20 || mem.RequestPolicy.Default.Value() != 10930<<20 || mem.RequestPolicy.ValidRange.Max.Value() != 10930<<20 {
		t.Errorf("gpu-0 memory %+v; want the 10930Mi the pods leave, by default all of it", mem)
	}
	if cpu.Value.Value() != 70 || cpu.RequestPolicy.ValidRange.Max.Value() != 70 {
		t.Errorf("gpu-0 compute %+v; want the 70%% the pods leave", cpu)
	}
	if got := attr(devs[0].Attributes[AttrMemoryMiB]); got != "14930" {
		t.Errorf("gpu-0 memoryMiB %s; want the GPU's 14930", got)
	}
	if mem := devs[1].Capacity[Memory]; mem.Value.Value() != 14930<<20 {
		t.Errorf("gpu-1, booked by no pod: memory %+v; want all 14930Mi", mem)
	}
	whole := DevicesBeside([]gpu.Device{a, b}, Options{WholeCard: true}, map[string]Share{a.UUID: {MemoryMiB: 14930, ComputePercent: 100}})
	if len(whole) != 1 || whole[0].Name != "gpu-1" {
		t.Errorf("whole-card devices %v; want gpu-1 alone: a pod holds gpu-0", names(whole))
	}
}

func TestConsumed(t *testing.T) {
	g := t4(0)
	result := func(c map[resourceapi.QualifiedName]string) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Driver: Driver, Pool: "node-a", Device: "gpu-0"}
		if c != nil {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]k8sresource.Quantity{}
			for k, v := range c {
				r.ConsumedCapacity[k] = k8sresource.MustParse(v)
			}
		}
		return r
	}
	for name, c := range map[string]struct {
		consumed map[resourceapi.QualifiedName]string
		want     Share
	}{
		"none":        {nil, Share{14930, 100}},
		"memory":      {map[resourceapi.QualifiedName]string{Memory: "4Gi"}, Share{4096, 0}},
		"the default": {map[resourceapi.QualifiedName]string{Memory: "14930Mi", Compute: "0"}, Share{14930, 0}},
		"both":        {map[resourceapi.QualifiedName]string{Memory: "1000Mi", Compute: "30"}, Share{1000, 30}},
		"all of them": {map[resourceapi.QualifiedName]string{Memory: "14930Mi", Compute: "100"}, Share{14930, 100}},
	} {
		got, err := Consumed(result(c.consumed), g)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, c.want)
		}
	}
	for name, c := range map[string]struct {
		r    resourceapi.DeviceRequestAllocationResult
		want string
	}{
		"other driver":     {resourceapi.DeviceRequestAllocationResult{Driver: "gpu.nvidia.com", Device: "gpu-0"}, "not gpu.gpushare.io"},
		"other device":     {resourceapi.DeviceRequestAllocationResult{Driver: Driver, Device: "gpu-1"}, "read against GPU 0"},
		"part of a MiB":    {result(map[resourceapi.QualifiedName]string{Memory: "1500Ki"}), "whole number of MiB"},
		"more than usable": {result(map[resourceapi.QualifiedName]string{Memory: "15Gi"}), "from 1 to 14930"},
		"negative compute": {result(map[resourceapi.QualifiedName]string{Compute: "-1"}), "whole percent"},
		"zero memory":      {result(map[resourceapi.QualifiedName]string{Memory: "0"}), "whole number of MiB"},
		"part of percent":  {result(map[resourceapi.QualifiedName]string{Compute: "500m"}), "whole percent"},
		"over 100":         {result(map[resourceapi.QualifiedName]string{Compute: "200"}), "whole percent"},
	} {
		if _, err := Consumed(c.r, g); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error saying %q", name, err, c.want)
		}
	}
}

func names(devs []resourceapi.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out
}

// attr is an attribute's value as text.
func attr(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return k8sresource.NewQuantity(*a.IntValue, k8sresource.DecimalSI).String()
	case a.BoolValue != nil:
		if *a.BoolValue {
			return "true"
		}
		return "false"
	}
	return ""
}

// An admin-access result consumes nothing of its GPU: DRA's allocator
// does not count it, and Prepare must not refuse the next claim for it.
func TestConsumedAdminAccess(t *testing.T) {
	admin := true
	r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: Driver, Pool: "n1", Device: DeviceName(0), AdminAccess: &admin}
	if s, err := Consumed(r, t4(0)); err != nil || s != (Share{}) {
		t.Errorf("Consumed = %+v, %v; want nothing", s, err)
	}
	r.AdminAccess = nil
	if s, err := Consumed(r, t4(0)); err != nil || s != (Share{MemoryMiB: 14930, ComputePercent: 100}) {
		t.Errorf("without admin access: Consumed = %+v, %v; want the whole GPU", s, err)
	}
}
