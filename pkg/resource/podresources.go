package resource

import (
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
)

// cpuMemory is an amount of CPU (milli) and memory (bytes).
type cpuMemory struct{ milli, bytes int64 }

func (a cpuMemory) add(b cpuMemory) cpuMemory {
	return cpuMemory{a.milli + b.milli, a.bytes + b.bytes}
}

func (a cpuMemory) maxOf(b cpuMemory) cpuMemory {
	return cpuMemory{max(a.milli, b.milli), max(a.bytes, b.bytes)}
}

// effectiveCPUMemory is Kubernetes' effective request of a pod, in milli-CPU
// and MiB (rounded up):
//
//	max(sum(app) + sum(sidecars), max over init containers i of
//	    (i + sidecars declared before i))  + overhead
//
// A sidecar counts towards the init containers after it, and towards itself.
// Pod-level requests (spec.resources), where set, replace the containers'
// sum. A request left out where a limit is set takes the limit, as the API
// server's defaulting does, so pods read from files count as they would
// once created.
func effectiveCPUMemory(spec *corev1.PodSpec) (cpuMilli, memoryMiB int64) {
	var apps, sidecars, inits cpuMemory
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		r := requests(&c.Resources)
		if isSidecar(c) {
			apps = apps.add(r)
			sidecars = sidecars.add(r)
			inits = inits.maxOf(sidecars)
			continue
		}
		inits = inits.maxOf(r.add(sidecars))
	}
	for i := range spec.Containers {
		apps = apps.add(requests(&spec.Containers[i].Resources))
	}
	total := apps.maxOf(inits)
	if spec.Resources != nil {
		pod := requests(spec.Resources)
		if hasRequest(spec.Resources, corev1.ResourceCPU) {
			total.milli = pod.milli
		}
		if hasRequest(spec.Resources, corev1.ResourceMemory) {
			total.bytes = pod.bytes
		}
	}
	if q, ok := spec.Overhead[corev1.ResourceCPU]; ok {
		total.milli += q.MilliValue()
	}
	if q, ok := spec.Overhead[corev1.ResourceMemory]; ok {
		total.bytes += q.Value()
	}
	const mib = 1 << 20
	return total.milli, (total.bytes + mib - 1) / mib
}

// requests returns the CPU and memory requests, a limit standing in for a
// missing request.
func requests(r *corev1.ResourceRequirements) cpuMemory {
	var out cpuMemory
	if q, ok := request(r, corev1.ResourceCPU); ok {
		out.milli = q.MilliValue()
	}
	if q, ok := request(r, corev1.ResourceMemory); ok {
		out.bytes = q.Value()
	}
	return out
}

func hasRequest(r *corev1.ResourceRequirements, name corev1.ResourceName) bool {
	_, ok := request(r, name)
	return ok
}

func request(r *corev1.ResourceRequirements, name corev1.ResourceName) (k8sresource.Quantity, bool) {
	if q, ok := r.Requests[name]; ok {
		return q, true
	}
	q, ok := r.Limits[name]
	return q, ok
}
