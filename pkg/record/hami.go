package record

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// Where HAMi's scheduler records a placement: the annotations it writes on
// a pod when it filters and binds it, before gpushare took over.
const (
	// HAMiNode is the node HAMi placed the pod on.
	HAMiNode = "hami.io/vgpu-node"
	// HAMiAllocated lists each container's GPUs, as HAMi's
	// EncodePodSingleDevice writes them: one slot per container ending in
	// ";" (init containers first, from HAMi v2.9; app containers only
	// before), and in a slot each GPU as "UUID,NVIDIA,MiB,cores:". A
	// container without GPUs has an empty slot. HAMi never erases it.
	HAMiAllocated = "hami.io/vgpu-devices-allocated"
	// HAMiToAllocate is the same list, which HAMi's device plugin empties
	// as it serves the containers.
	HAMiToAllocate = "hami.io/vgpu-devices-to-allocate"
)

// hamiDevice is one GPU of a container in HAMi's record.
type hamiDevice struct {
	uuid       string
	mib, cores int64
}

// HAMiAllocation translates the placement HAMi's scheduler recorded on pod
// into gpushare's record, as gpushare would have written it: each
// container of req on the GPUs, named by UUID, that its slot of
// hami.io/vgpu-devices-allocated lists, with the share req gives it. The
// record must agree with req: as many distinct GPUs as the container
// asks, on each the MiB it asks (for a share in MiB) and its compute
// (for a share), and no GPUs for a container that asks none.
// hami.io/vgpu-node, where present, must be the pod's node. The GPUs'
// indexes, the size of whole GPUs and the MiB of a percent of a GPU come
// from the node (OnNode).
func HAMiAllocation(pod *corev1.Pod, req *alloc.PodRequest) (*gpusharev1.Allocation, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrHAMiRecord, fmt.Sprintf(format, args...))
	}
	if n, ok := pod.Annotations[HAMiNode]; ok && n != pod.Spec.NodeName {
		return nil, fail("%s=%q, the pod is bound to %q", HAMiNode, n, pod.Spec.NodeName)
	}
	slots, err := hamiSlots(pod)
	if err != nil {
		return nil, fail("%s: %v", HAMiAllocated, err)
	}
	asks := make(map[string]*alloc.PodContainer, len(req.Containers))
	for i := range req.Containers {
		asks[req.Containers[i].Name] = &req.Containers[i]
	}
	a := &gpusharev1.Allocation{Node: pod.Spec.NodeName}
	for i := range req.Containers {
		c := &req.Containers[i]
		devs := slots[c.Name]
		if len(devs) != c.GPUCount() {
			return nil, fail("container %s asks %d GPUs, the record gives it %d", c.Name, c.GPUCount(), len(devs))
		}
		d := c.PerGPU()
		ca := gpusharev1.ContainerAllocation{Name: c.Name, Kind: kinds[c.Kind]}
		for _, dev := range devs {
			switch {
			case d.Exclusive:
			case dev.cores != d.Compute:
				return nil, fail("container %s: GPU %s gets %d%% compute, the container asks %d%%", c.Name, dev.uuid, dev.cores, d.Compute)
			case d.MemoryPercent == 0 && dev.mib != d.MemoryMiB:
				return nil, fail("container %s: GPU %s gets %d MiB, the container asks %d MiB", c.Name, dev.uuid, dev.mib, d.MemoryMiB)
			}
			ca.GPUs = append(ca.GPUs, gpusharev1.GPUShare{Index: -1, UUID: dev.uuid, MemoryMiB: d.MemoryMiB, Compute: d.Compute})
		}
		a.Containers = append(a.Containers, ca)
	}
	for name, devs := range slots {
		if len(devs) > 0 && asks[name] == nil {
			return nil, fail("container %s asks no GPU, the record gives it %d", name, len(devs))
		}
	}
	return a, nil
}

// hamiSlots reads pod's HAMiAllocated into each container's GPUs, by
// container name. A record with one slot per container, init containers
// included, is HAMi v2.9's and later; one with a slot per app container,
// the earlier releases'.
func hamiSlots(pod *corev1.Pod) (map[string][]hamiDevice, error) {
	v := pod.Annotations[HAMiAllocated]
	parts := strings.Split(v, ";")
	if parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	n := len(pod.Spec.InitContainers) + len(pod.Spec.Containers)
	// Empty slots past the containers' (HAMi's decoder keeps one).
	for len(parts) > n && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	var names []string
	switch {
	case len(parts) == n:
		for i := range pod.Spec.InitContainers {
			names = append(names, pod.Spec.InitContainers[i].Name)
		}
		fallthrough
	case len(parts) == len(pod.Spec.Containers):
		for i := range pod.Spec.Containers {
			names = append(names, pod.Spec.Containers[i].Name)
		}
	default:
		return nil, fmt.Errorf("%q has %d container slots, the pod has %d containers (%d init)", v, len(parts), n, len(pod.Spec.InitContainers))
	}
	out := make(map[string][]hamiDevice, len(names))
	for i, part := range parts {
		var devs []hamiDevice
		for s := range strings.SplitSeq(part, ":") {
			if !strings.Contains(s, ",") {
				continue
			}
			f := strings.Split(s, ",")
			if len(f) < 4 {
				return nil, fmt.Errorf("%q is not UUID,type,MiB,cores", s)
			}
			if f[0] == "" {
				continue // a GPU-less container, as early releases wrote it
			}
			mib, err1 := strconv.ParseInt(f[2], 10, 32)
			cores, err2 := strconv.ParseInt(f[3], 10, 32)
			if err1 != nil || err2 != nil || mib < 0 || cores < 0 {
				return nil, fmt.Errorf("%q: MiB and cores must be non-negative integers", s)
			}
			if slices.ContainsFunc(devs, func(d hamiDevice) bool { return d.uuid == f[0] }) {
				return nil, fmt.Errorf("%q: GPU %s is listed twice", part, f[0])
			}
			devs = append(devs, hamiDevice{uuid: f[0], mib: mib, cores: min(cores, alloc.FullCompute)})
		}
		out[names[i]] = devs
	}
	return out, nil
}
