package holder

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/resource"
)

// asksMPS reports whether the named container of pod, init or app, asks
// for a resource of kind MPS (keti.com/mpsgpu). Only such a container is
// an MPS client: it gets the MPS environment and mounts on a node that
// runs MPS. Other containers on the same GPUs run as plain CUDA contexts
// beside the MPS server, as they would on a node without MPS, unless
// the node holds every share by MPS (enforcedBy).
func (c *Resolver) asksMPS(pod *corev1.Pod, container string) bool {
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

// enforcedBy says what holds the named container of pod, with allocation
// a, to its share: MPS for a container that asks for MPS, and under the
// node's Enforcement for a container that shares its GPUs (a share of
// compute below a whole GPU's) MPS or HAMi-core. A container of whole
// GPUs needs neither.
func (c *Resolver) enforcedBy(pod *corev1.Pod, container string, a *gpusharev1.ContainerAllocation) (mps, hamiCore bool) {
	shared := slices.ContainsFunc(a.GPUs, func(g gpusharev1.GPUShare) bool { return g.Compute < alloc.FullCompute })
	switch c.cfg.Enforcement.Holds(c.asksMPS(pod, container), shared) {
	case gpusharev1.EnforcementMPS:
		return c.cfg.MPS != nil, false
	case gpusharev1.EnforcementHAMiCore:
		return false, c.cfg.HAMiCore != nil
	}
	return false, false
}
