package claims

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/resource"
)

// asksMPS reports whether the named container of pod, init or app, asks
// for a resource of kind MPS (keti.com/mpsgpu). Only such a container is
// an MPS client: it gets the MPS environment and mounts on a node that
// runs MPS. Other containers on the same GPUs run as plain CUDA contexts
// beside the MPS server, as they would on a node without MPS.
func (c *Claims) asksMPS(pod *corev1.Pod, container string) bool {
	ct := resource.Container(pod, container)
	if ct == nil {
		return false
	}
	for _, r := range c.cfg.MPSResources {
		if resource.ContainerAsks(ct, r) {
			return true
		}
	}
	return false
}
