package resource

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// PodRequest translates a pod into what it asks of a node: its effective
// CPU and memory and one PodContainer per GPU-requesting container, init
// and sidecar containers first in declared order, then app containers. An
// error is a *RequestError wrapping alloc.ErrInvalidRequest; the first
// problem found, in container order, is reported.
func (m *Model) PodRequest(pod *corev1.Pod) (*alloc.PodRequest, error) {
	key := pod.Namespace + "/" + pod.Name
	cpu, mem := effectiveCPUMemory(&pod.Spec)
	req := &alloc.PodRequest{Key: key, CPUMilli: cpu, MemoryMiB: mem}
	t := translator{m: m, pod: pod, key: key, largest: m.LargestGPU()}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		kind := alloc.Init
		if isSidecar(c) {
			kind = alloc.Sidecar
		}
		if err := t.add(req, c, kind); err != nil {
			return nil, err
		}
	}
	for i := range pod.Spec.Containers {
		if err := t.add(req, &pod.Spec.Containers[i], alloc.App); err != nil {
			return nil, err
		}
	}
	if err := servable(req); err != nil {
		return nil, err
	}
	if req.GPUs() {
		models, err := m.models(pod, key)
		if err != nil {
			return nil, err
		}
		f := filter(pod)
		for i := range req.Containers {
			req.Containers[i].Models = slices.Clone(models)
			req.Containers[i].Filter = f
		}
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// servable refuses a GPU init container that no GPU app or sidecar
// container follows: the kubelet's PodResources lists no init containers,
// so the node daemon finds an init container's devices only within a later
// GPU container's, and could not hand it its GPUs.
func servable(req *alloc.PodRequest) error {
	last := -1
	for i := range req.Containers {
		if req.Containers[i].Kind != alloc.Init {
			last = i
		}
	}
	for i := range req.Containers {
		if c := &req.Containers[i]; c.Kind == alloc.Init && i > last {
			return &RequestError{Pod: req.Key, Container: c.Name, Resource: "init container",
				Reason: "asks for GPUs but no app or sidecar container after it does, and gpushare can hand an init container GPUs only " +
					"alongside a later GPU container; give an app container a GPU request too, or drop the init container's"}
		}
	}
	return nil
}

// translator carries what the containers of one pod share.
type translator struct {
	m   *Model
	pod *corev1.Pod
	key string
	// largest is the largest GPU's memory in MiB, 0 if unknown.
	largest int64
	// mps is the pod's MPS share, read on the first MPS container.
	mps *mpsShare
}

func (t *translator) add(req *alloc.PodRequest, c *corev1.Container, kind alloc.ContainerKind) error {
	cr, err := t.container(c)
	if err != nil || cr == nil {
		return err
	}
	req.Containers = append(req.Containers, alloc.PodContainer{ContainerRequest: *cr, Kind: kind})
	return nil
}

func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}
