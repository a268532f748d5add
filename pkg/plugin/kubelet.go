package plugin

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	podresource "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// ask is how much of one resource a pod asks.
type ask struct {
	name corev1.ResourceName
	n    int64
}

// kubeletAsks returns the pod's effective requests (Kubernetes' rule for
// init containers and sidecars) of the resources gpushare manages, sorted
// by name; nil if it asks none. Filter checks them on every node, so they
// are worked out once per cycle.
//
// kube-scheduler's NodeResourcesFit leaves these resources to gpushare
// (ignoredResourceGroups), but a node's kubelet still counts those a
// device plugin serves there, in the device plugin's units, and refuses a
// pod that needs more than are free (UnexpectedAdmissionError): a pod
// that its ReplicaSet then recreates at once, over and over. So Filter
// holds each node to what its kubelet advertises (kubeletShort).
func kubeletAsks(pod *corev1.Pod, managed []corev1.ResourceName) []ask {
	var asks []ask
	for name, q := range podresource.PodRequests(pod, podresource.PodResourcesOptions{}) {
		if v := q.Value(); v > 0 && slices.Contains(managed, name) {
			asks = append(asks, ask{name: name, n: v})
		}
	}
	slices.SortFunc(asks, func(a, b ask) int { return strings.Compare(string(a.name), string(b.name)) })
	return asks
}

// kubeletAsks is kubeletAsks over the resource model's names and the
// hook resource, which gpushare-node also serves as devices.
func (pl *GPUShare) kubeletAsks(pod *corev1.Pod) []ask {
	return kubeletAsks(pod, append(pl.model.Names(), gpusharev1.HookResource))
}

// kubeletShort says why node's kubelet would refuse a pod with asks: a
// resource that the node advertises (a device plugin serves it there)
// with fewer units free than the pod needs; "" if none. Resources the
// node does not advertise (served through gpushare's hooks, or a node
// without a kubelet) are gpushare's alone to count.
func kubeletShort(asks []ask, node fwk.NodeInfo) string {
	if len(asks) == 0 {
		return ""
	}
	allocatable := node.GetAllocatable().GetScalarResources()
	if len(allocatable) == 0 {
		return ""
	}
	requested := node.GetRequested().GetScalarResources()
	for _, a := range asks {
		total, ok := allocatable[a.name]
		if !ok {
			continue
		}
		if free := total - requested[a.name]; a.n > free {
			return fmt.Sprintf("node's kubelet has %d of %d %s free, pod needs %d: it would refuse the pod "+
				"(is gpushare-node on that node counting %s in other units than the scheduler? give it the scheduler's resource model)",
				max(free, 0), total, a.name, a.n, a.name)
		}
	}
	return ""
}
