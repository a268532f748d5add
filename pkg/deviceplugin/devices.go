package deviceplugin

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/resource"
)

// DefaultSlotsPerGPU is how many containers may hold a Count or MPS
// resource of one GPU at once.
const DefaultSlotsPerGPU = 100

// DefaultMaxDevices bounds the devices of one resource so that its
// ListAndWatch message stays under the kubelet's 4 MiB gRPC limit (about
// 20 bytes per device; see TestListAndWatchFitsMessageLimit).
const DefaultMaxDevices = 150_000

// DefaultHookDevices is how many devices the hook resource has: more than
// a node runs pods (the kubelet's maxPods is 110 by default, 250 at most
// as commonly set), with room for pods of several GPU containers (the
// n-th holds n).
const DefaultHookDevices = 512

// kindHook is the kind of the hook resource (gpusharev1.HookResource):
// devices that stand for no share of a GPU; most GPU containers hold one.
const kindHook v1alpha1.ResourceKind = "Hook"

// hook returns the hook resource.
func hook() Resource {
	return Resource{Name: gpusharev1.HookResource, Kind: kindHook}
}

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
		if r.Kind.Memory() {
			res.UnitMiB = resource.UnitMiB(r.Unit)
			for _, o := range c.UnitOverrides {
				if o.Name == r.Name {
					res.UnitMiB = min(res.UnitMiB, resource.UnitMiB(o.Unit))
				}
			}
		}
		out = append(out, res)
	}
	return out
}

// perGPU is how many devices each GPU gives resource r.
func (r Resource) perGPU(g gpu.Device, slots int) int64 {
	switch r.Kind {
	case v1alpha1.KindMemory, v1alpha1.KindMemoryPerGPU:
		return g.MemoryMiB / max(r.UnitMiB, 1)
	case v1alpha1.KindCompute, v1alpha1.KindComputePerGPU, v1alpha1.KindMemoryPercent:
		return 100
	default:
		return int64(slots)
	}
}

// sizing holds the device counts of Config.
type sizing struct {
	// slots per GPU of a Count or MPS resource; hooks on the node; at
	// most maxDevices of one resource.
	slots, hooks, maxDevices int
	// hookMemory: no devices for Memory resources in MiB (Config).
	hookMemory bool
}

// size is how many devices r has on gpus: hooks are a fixed number, for
// the node rather than for any GPU.
func (r Resource) size(gpus []gpu.Device, z sizing) int64 {
	if r.Kind == kindHook {
		return int64(z.hooks)
	}
	var total int64
	for _, g := range gpus {
		total += r.perGPU(g, z.slots)
	}
	return total
}

// preferredMaxDevices is the largest device list for which the plugin
// offers GetPreferredAllocation. The kubelet sends every available device
// ID with each such call (MBs per container for MiB tokens), and tokens
// are interchangeable: above this the kubelet's own choice is as good.
const preferredMaxDevices = 4096

// count returns how many devices r has on gpus, or an error when there
// would be more than z.maxDevices.
func (r Resource) count(gpus []gpu.Device, z sizing) (int64, error) {
	total := r.size(gpus, z)
	if z.hookMemory && r.Kind.Memory() && r.UnitMiB == 1 {
		return total, fmt.Errorf("%s is counted by gpushare's scheduler, not in devices (--hook-memory): "+
			"the kubelet admits pods without counting it and their containers get their GPUs through %s",
			r.Name, gpusharev1.HookResource)
	}
	if total > int64(z.maxDevices) {
		return total, fmt.Errorf("%s would need %d devices, over the %d that fit the kubelet's 4 MiB message limit: "+
			"it is not a device plugin resource on this node, so the kubelet admits pods without counting it "+
			"and their containers get their GPUs through %s (deploy/gpu-hook-policy.yaml adds it to pods)",
			r.Name, total, z.maxDevices, gpusharev1.HookResource)
	}
	return total, nil
}

// deviceList returns r's devices on gpus: "<gpu index>-<n>", healthy as
// their GPU ("hook-<n>" for the hook resource). They carry no NUMA node:
// they are tokens, and the GPU comes from the record. It fails when there
// would be more than z.maxDevices.
func (r Resource) deviceList(gpus []gpu.Device, z sizing) ([]*pluginapi.Device, error) {
	total, err := r.count(gpus, z)
	if err != nil {
		return nil, err
	}
	out := make([]*pluginapi.Device, 0, total)
	if r.Kind == kindHook {
		// Healthy whatever the GPUs: a container whose recorded GPU is
		// unhealthy is refused when it starts.
		for n := range total {
			out = append(out, &pluginapi.Device{ID: "hook-" + strconv.FormatInt(n, 10), Health: pluginapi.Healthy})
		}
		return out, nil
	}
	for _, g := range gpus {
		health := pluginapi.Healthy
		if !g.Healthy {
			health = pluginapi.Unhealthy
		}
		prefix := strconv.Itoa(g.Index) + "-"
		for n := range r.perGPU(g, z.slots) {
			out = append(out, &pluginapi.Device{ID: prefix + strconv.FormatInt(n, 10), Health: health})
		}
	}
	return out, nil
}

// MPSResources returns the names of the resources of kind MPS among rs:
// a container that asks for one is an MPS client.
func MPSResources(rs []Resource) []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, r := range rs {
		if r.Kind == v1alpha1.KindMPS {
			out = append(out, r.Name)
		}
	}
	return out
}
