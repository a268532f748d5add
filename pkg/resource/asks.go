package resource

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
)

// The node daemon asks these of a pod's spec: which container asks for
// what, by the same rules the translation into requests goes by.

// ContainerAsks reports whether c asks for resource name: a limit or a
// request of it that is not zero.
func ContainerAsks(c *corev1.Container, name corev1.ResourceName) bool {
	if q, ok := c.Resources.Limits[name]; ok && !q.IsZero() {
		return true
	}
	q, ok := c.Resources.Requests[name]
	return ok && !q.IsZero()
}

// Asks reports whether a container of pod, init or app, asks for name.
func Asks(pod *corev1.Pod, name corev1.ResourceName) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if ContainerAsks(&list[i], name) {
				return true
			}
		}
	}
	return false
}

// InitAsks reports whether an init container of pod that is not a
// sidecar asks for name.
func InitAsks(pod *corev1.Pod, name corev1.ResourceName) bool {
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; !isSidecar(c) && ContainerAsks(c, name) {
			return true
		}
	}
	return false
}

// IsSidecar reports whether c is a sidecar: an init container that keeps
// running (restartPolicy Always).
func IsSidecar(c *corev1.Container) bool { return isSidecar(c) }

// Container returns the container of pod, init or app, named name; nil if
// there is none.
func Container(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// UnitMiB returns the MiB in one unit u of a Memory resource.
func UnitMiB(u v1alpha1.MemoryUnit) int64 {
	if u == v1alpha1.GiB {
		return 1024
	}
	return 1
}
