package resource

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// The pod annotations by which HAMi's users pick GPUs (HAMi's
// nvidia.com/use-gputype and the others): comma-separated lists, empty
// parts and spaces around parts ignored. A type matches a GPU whose HAMi
// type (alloc.GPUType) contains it, ignoring case; a UUID matches exactly.
const (
	UseGPUType   = "nvidia.com/use-gputype"
	NoUseGPUType = "nvidia.com/nouse-gputype"
	UseGPUUUID   = "nvidia.com/use-gpuuuid"
	NoUseGPUUUID = "nvidia.com/nouse-gpuuuid"
)

// filterAnnotations are the annotations filter reads.
var filterAnnotations = []string{UseGPUType, NoUseGPUType, UseGPUUUID, NoUseGPUUUID}

// The pod annotations by which HAMi's users pick a policy for their pod:
// binpack or spread, among nodes and among a node's GPUs.
const (
	NodePolicyAnnotation = "hami.io/node-scheduler-policy"
	GPUPolicyAnnotation  = "hami.io/gpu-scheduler-policy"
)

// filter returns the GPU filter of pod's HAMi annotations, nil if it has
// none.
func filter(pod *corev1.Pod) *alloc.Filter {
	var f alloc.Filter
	for _, p := range []struct {
		key string
		to  *[]string
	}{{UseGPUType, &f.Types}, {NoUseGPUType, &f.NotTypes}, {UseGPUUUID, &f.UUIDs}, {NoUseGPUUUID, &f.NotUUIDs}} {
		*p.to = commaList(pod.Annotations[p.key])
	}
	if f.Types == nil && f.NotTypes == nil && f.UUIDs == nil && f.NotUUIDs == nil {
		return nil
	}
	return &f
}

// commaList splits a comma-separated list, dropping empty parts.
func commaList(v string) []string {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// PodPolicies returns the node and GPU policies pod asks for itself
// (NodePolicyAnnotation, GPUPolicyAnnotation), "" where it asks none, or
// a *RequestError for a policy other than alloc.PodPolicies: HAMi's GPU
// policies topology-aware, mutex and numa have no counterpart a pod can
// pick in gpushare.
func PodPolicies(pod *corev1.Pod) (node, gpu string, err error) {
	key := pod.Namespace + "/" + pod.Name
	read := func(annotation string) (string, error) {
		v := strings.TrimSpace(pod.Annotations[annotation])
		if v == "" || slices.Contains(alloc.PodPolicies, v) {
			return v, nil
		}
		return "", &RequestError{Pod: key, Resource: annotation,
			Reason: "\"" + v + "\" is not a policy a pod may pick in gpushare; write " + strings.Join(alloc.PodPolicies, " or ") +
				", or remove the annotation to be placed by the cluster's policy"}
	}
	if node, err = read(NodePolicyAnnotation); err != nil {
		return "", "", err
	}
	gpu, err = read(GPUPolicyAnnotation)
	return node, gpu, err
}
