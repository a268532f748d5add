package deviceplugin

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
)

// asksMPS reports whether the named container of pod, init or app, asks
// for a resource of kind MPS (keti.com/mpsgpu). Only such a container is
// an MPS client: it gets the MPS environment and mounts on a node that
// runs MPS. Other containers on the same GPUs run as plain CUDA contexts
// beside the MPS server, as they would on a node without MPS.
func (m *Manager) asksMPS(pod *corev1.Pod, container string) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name != container {
				continue
			}
			for _, r := range m.cfg.Resources {
				if r.Kind == v1alpha1.KindMPS && containerAsks(&cs[i], string(r.Name)) {
					return true
				}
			}
			return false
		}
	}
	return false
}
