package resource

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	podresource "k8s.io/component-helpers/resource"
)

// effectiveCPUMemory is Kubernetes' effective request of a pod, in milli-CPU
// and MiB (rounded up), as the scheduler computes it with
// k8s.io/component-helpers/resource.PodRequests:
//
//	max(sum(app) + sum(sidecars), max over init containers i of
//	    (i + sidecars declared before i))  + overhead
//
// Pod-level requests (spec.resources), where set, replace the containers'
// sum. Only CPU and memory are counted: GPU resources are per container and
// translated one container at a time.
//
// Unlike PodRequests, a request left out where a limit is set takes the
// limit, as the API server's defaulting does, so pods read from files count
// as they would once created; and each amount is first rounded up to a
// whole milli-CPU or byte, so the sum is one of whole numbers.
func effectiveCPUMemory(spec *corev1.PodSpec) (cpuMilli, memoryMiB int64) {
	if cpu, mem, ok := containersCPUMemory(spec); ok {
		return cpu, mem
	}
	return podRequestsCPUMemory(spec)
}

// containersCPUMemory is effectiveCPUMemory for the usual pod: no init
// containers, no overhead, no pod-level resources, where the effective
// request is the containers' sum. It adds the amounts as integers: the
// schedulers ask for each GPU pod's request once or twice per cycle, and
// PodRequests's lists of Quantities cost as much as a tenth of a filter
// call. False for any other pod, or amounts whose sum would overflow.
func containersCPUMemory(spec *corev1.PodSpec) (cpuMilli, memoryMiB int64, ok bool) {
	if len(spec.InitContainers) > 0 || len(spec.Overhead) > 0 || spec.Resources != nil {
		return 0, 0, false
	}
	var bytes int64
	for i := range spec.Containers {
		r := &spec.Containers[i].Resources
		for _, name := range [...]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			q, set := r.Requests[name]
			if !set {
				if q, set = r.Limits[name]; !set {
					continue
				}
			}
			sum, v := &bytes, q.Value()
			if name == corev1.ResourceCPU {
				sum, v = &cpuMilli, q.MilliValue()
			}
			if v < 0 || *sum > math.MaxInt64-v {
				return 0, 0, false
			}
			*sum += v
		}
	}
	const mib = 1 << 20
	return cpuMilli, bytes/mib + min(bytes%mib, 1), true
}

// podRequestsCPUMemory is effectiveCPUMemory for any pod, through
// PodRequests.
func podRequestsCPUMemory(spec *corev1.PodSpec) (cpuMilli, memoryMiB int64) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: make([]corev1.Container, len(spec.InitContainers)),
		Containers:     make([]corev1.Container, len(spec.Containers)),
		Overhead:       cpuMemoryList(spec.Overhead, nil),
	}}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		pod.Spec.InitContainers[i] = corev1.Container{
			RestartPolicy: c.RestartPolicy,
			Resources:     corev1.ResourceRequirements{Requests: cpuMemoryList(c.Resources.Requests, c.Resources.Limits)},
		}
	}
	for i := range spec.Containers {
		r := &spec.Containers[i].Resources
		pod.Spec.Containers[i].Resources.Requests = cpuMemoryList(r.Requests, r.Limits)
	}
	if r := spec.Resources; r != nil {
		pod.Spec.Resources = &corev1.ResourceRequirements{Requests: cpuMemoryList(r.Requests, r.Limits)}
	}
	total := podresource.PodRequests(pod, podresource.PodResourcesOptions{})
	if q, ok := total[corev1.ResourceCPU]; ok {
		cpuMilli = q.MilliValue()
	}
	if q, ok := total[corev1.ResourceMemory]; ok {
		const mib = 1 << 20
		memoryMiB = (q.Value() + mib - 1) / mib
	}
	return cpuMilli, memoryMiB
}

// PodCPUMemory returns a pod's effective CPU and memory request, in
// milli-CPU and MiB (rounded up), as kube-scheduler counts it against its
// node.
func PodCPUMemory(pod *corev1.Pod) (cpuMilli, memoryMiB int64) {
	return effectiveCPUMemory(&pod.Spec)
}

// cpuMemoryList returns the CPU and memory of requests, a limit standing in
// for a missing request, rounded up to a whole milli-CPU and byte; nil if
// neither is set.
func cpuMemoryList(requests, limits corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for _, name := range [...]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, ok := requests[name]
		if !ok {
			if q, ok = limits[name]; !ok {
				continue
			}
		}
		if out == nil {
			out = make(corev1.ResourceList, 2)
		}
		if name == corev1.ResourceCPU {
			out[name] = *k8sresource.NewMilliQuantity(q.MilliValue(), k8sresource.DecimalSI)
		} else {
			out[name] = *k8sresource.NewQuantity(q.Value(), k8sresource.BinarySI)
		}
	}
	return out
}
