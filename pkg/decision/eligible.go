package decision

import (
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Eligible returns whether pod may land on node by its required node
// affinity (nodeSelector included) and its tolerations of the node's
// NoSchedule and NoExecute taints: what kube-scheduler's NodeAffinity
// and TaintToleration filters check, for those who place or move pods
// outside a scheduling cycle (the defragmentation plan, inspect).
func Eligible(pod *corev1.Pod, node *corev1.Node) bool {
	return EligibleBy(nodeaffinity.GetRequiredNodeAffinity(pod), pod, node)
}

// EligibleBy is Eligible with pod's required node affinity read already
// (nodeaffinity.GetRequiredNodeAffinity), for many nodes.
func EligibleBy(affinity nodeaffinity.RequiredNodeAffinity, pod *corev1.Pod, node *corev1.Node) bool {
	if ok, err := affinity.Match(node); err != nil || !ok {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return !untolerated
}
