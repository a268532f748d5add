package deviceplugin

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// DefaultSlotsPerGPU is how many containers may hold a Count or MPS
// resource of one GPU at once.
const DefaultSlotsPerGPU = 100

// DefaultMaxDevices bounds the devices of one resource so that its
// ListAndWatch message stays under the kubelet's 4 MiB gRPC limit (about
// 20 bytes per device; see TestListAndWatchFitsMessageLimit).
const DefaultMaxDevices = 150_000

// Resource is one extended resource the plugin serves.
type Resource struct {
	Name corev1.ResourceName
	Kind v1alpha1.ResourceKind
	// UnitMiB is the MiB in one device of a Memory resource: the
	// smallest unit any namespace uses for it.
	UnitMiB int64
}

// ResourcesFrom lists the resources of a resource model configuration
// (defaulted), each Memory resource in its smallest unit.
func ResourcesFrom(m *v1alpha1.ResourceModel) []Resource {
	c := v1alpha1.Default()
	if m != nil {
		c = m.DeepCopy()
		v1alpha1.SetDefaults(c)
	}
	out := make([]Resource, 0, len(c.Resources))
	for _, r := range c.Resources {
		res := Resource{Name: r.Name, Kind: r.Kind}
		if r.Kind == v1alpha1.KindMemory {
			res.UnitMiB = unitMiB(r.Unit)
			for _, o := range c.UnitOverrides {
				if o.Name == r.Name {
					res.UnitMiB = min(res.UnitMiB, unitMiB(o.Unit))
				}
			}
		}
		out = append(out, res)
	}
	return out
}

func unitMiB(u v1alpha1.MemoryUnit) int64 {
	if u == v1alpha1.GiB {
		return 1024
	}
	return 1
}

// perGPU is how many devices each GPU gives resource r.
func (r Resource) perGPU(g gpu.Device, slots int) int64 {
	switch r.Kind {
	case v1alpha1.KindMemory:
		return g.MemoryMiB / max(r.UnitMiB, 1)
	case v1alpha1.KindCompute:
		return 100
	default:
		return int64(slots)
	}
}

// preferredMaxDevices is the largest device list for which the plugin
// offers GetPreferredAllocation. The kubelet sends every available device
// ID with each such call (MBs per container for MiB tokens), and tokens
// are interchangeable: above this the kubelet's own choice is as good.
const preferredMaxDevices = 4096

// count returns how many devices r has on gpus, or an error when there
// would be more than maxDevices.
func (r Resource) count(gpus []gpu.Device, slots, maxDevices int) (int64, error) {
	var total int64
	for _, g := range gpus {
		total += r.perGPU(g, slots)
	}
	if total > int64(maxDevices) {
		return total, fmt.Errorf("%s would need %d devices, over the %d that fit the kubelet's 4 MiB message limit; "+
			"count it in GiB on this node (resourceModel unit) or ask gpushare.io/gpu-mem with gpu-count", r.Name, total, maxDevices)
	}
	return total, nil
}

// deviceList returns r's devices on gpus: "<gpu index>-<n>", healthy as
// their GPU. They carry no NUMA node: they are tokens, and the GPU comes
// from the record. It fails when there would be more than maxDevices.
func (r Resource) deviceList(gpus []gpu.Device, slots, maxDevices int) ([]*pluginapi.Device, error) {
	total, err := r.count(gpus, slots, maxDevices)
	if err != nil {
		return nil, err
	}
	out := make([]*pluginapi.Device, 0, total)
	for _, g := range gpus {
		health := pluginapi.Healthy
		if !g.Healthy {
			health = pluginapi.Unhealthy
		}
		prefix := strconv.Itoa(g.Index) + "-"
		for n := range r.perGPU(g, slots) {
			out = append(out, &pluginapi.Device{ID: prefix + strconv.FormatInt(n, 10), Health: health})
		}
	}
	return out, nil
}
