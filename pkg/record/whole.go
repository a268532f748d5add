package record

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// wholeRequest is what another system's record on pod is read by when the
// resource model reads no GPU request from the pod (it no longer knows
// that system's resources): each container the record places, asking
// whole GPUs, as many as the record names for it. Booked so, the record
// holds those GPUs whole, never less than the pod's containers may be
// using, until the pod goes.
func wholeRequest(pod *corev1.Pod, sys error) (*alloc.PodRequest, error) {
	var hami map[string][]hamiDevice
	if errors.Is(sys, ErrHAMiRecord) {
		slots, err := hamiSlots(pod)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", HAMiAllocated, err)
		}
		hami = slots
	}
	count := func(c *corev1.Container) (int, error) {
		switch {
		case errors.Is(sys, ErrAliyunRecord):
			if _, ok := AliyunAmount(c); ok {
				return 1, nil
			}
		case errors.Is(sys, ErrElasticRecord):
			if !asksElastic(c) {
				return 0, nil
			}
			v, ok := pod.Annotations[ElasticContainerPrefix+c.Name]
			if !ok {
				return 0, fmt.Errorf("container %s asks GPUs, the pod has no %s", c.Name, ElasticContainerPrefix+c.Name)
			}
			idx, err := elasticIndexes(v)
			return len(idx), err
		case hami != nil:
			return len(hami[c.Name]), nil
		}
		return 0, nil
	}
	req := &alloc.PodRequest{Key: pod.Namespace + "/" + pod.Name}
	add := func(c *corev1.Container, kind alloc.ContainerKind) error {
		n, err := count(c)
		if err != nil || n == 0 {
			return err
		}
		req.Containers = append(req.Containers, alloc.PodContainer{Kind: kind,
			ContainerRequest: alloc.ContainerRequest{Name: c.Name, Count: n, Exclusive: true}})
		return nil
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		kind := alloc.Init
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			kind = alloc.Sidecar
		}
		if err := add(c, kind); err != nil {
			return nil, err
		}
	}
	for i := range pod.Spec.Containers {
		if err := add(&pod.Spec.Containers[i], alloc.App); err != nil {
			return nil, err
		}
	}
	if len(req.Containers) == 0 {
		return nil, errors.New("no container asks the GPUs it names")
	}
	return req, nil
}
