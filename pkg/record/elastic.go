package record

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// Where the Elastic GPU Scheduler records a placement: the annotations it
// writes on a pod at bind, before gpushare took over.
const (
	// ElasticAssumed is "true" on a pod Elastic placed.
	ElasticAssumed = "elasticgpu.io/assumed"
	// ElasticContainerPrefix, followed by a container's name, keys the
	// GPU indexes Elastic gave that container, comma-separated ("0" or
	// "0,1").
	ElasticContainerPrefix = "elasticgpu.io/container-"
)

// elasticResources are the names Elastic places by.
var elasticResources = []corev1.ResourceName{"elasticgpu.io/gpu-memory", "elasticgpu.io/gpu-core"}

// ElasticAllocation translates the placement the Elastic GPU Scheduler
// recorded on pod into gpushare's record, as gpushare would have written
// it: each container of req that asks elasticgpu.io/gpu-memory or
// elasticgpu.io/gpu-core on the GPUs elasticgpu.io/container-<name> lists
// on the pod's node, with the share req gives it. Elastic gives a share on
// one GPU, and gpu-core 100·k as k whole GPUs; it places app containers
// only. ElasticAssumed must be "true", as Elastic writes it. The GPUs are
// named by index only: OnNode fills in their UUIDs, and the size of whole
// GPUs, from the node. req is the pod's request as the resource model
// translates it, so a record whose pod asks other GPU resources too does
// not conform to it.
func ElasticAllocation(pod *corev1.Pod, req *alloc.PodRequest) (*gpusharev1.Allocation, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrElasticRecord, fmt.Sprintf(format, args...))
	}
	if v := pod.Annotations[ElasticAssumed]; v != "true" {
		return nil, fail("%s=%q, Elastic writes \"true\"", ElasticAssumed, v)
	}
	asks := map[string]bool{}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if asksElastic(&cs[i]) {
				asks[cs[i].Name] = true
			}
		}
	}
	if len(asks) == 0 {
		return nil, fail("the pod asks no %s or %s", elasticResources[0], elasticResources[1])
	}
	a := &gpusharev1.Allocation{Node: pod.Spec.NodeName}
	for i := range req.Containers {
		c := &req.Containers[i]
		if !asks[c.Name] {
			continue
		}
		key := ElasticContainerPrefix + c.Name
		v, ok := pod.Annotations[key]
		if !ok {
			return nil, fail("container %s asks GPUs, the pod has no %s", c.Name, key)
		}
		idx, err := elasticIndexes(v)
		if err != nil {
			return nil, fail("%s=%q: %v", key, v, err)
		}
		if len(idx) != c.GPUCount() {
			return nil, fail("%s=%q names %d GPUs, the container asks %d", key, v, len(idx), c.GPUCount())
		}
		d := c.PerGPU()
		ca := gpusharev1.ContainerAllocation{Name: c.Name, Kind: kinds[c.Kind]}
		for _, g := range idx {
			ca.GPUs = append(ca.GPUs, gpusharev1.GPUShare{Index: g, MemoryMiB: d.MemoryMiB, Compute: d.Compute})
		}
		a.Containers = append(a.Containers, ca)
	}
	return a, nil
}

// elasticIndexes parses Elastic's list of GPU indexes: distinct
// non-negative integers, comma-separated.
func elasticIndexes(v string) ([]int, error) {
	var out []int
	for s := range strings.SplitSeq(v, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || i < 0 {
			return nil, fmt.Errorf("%q is not a GPU index", s)
		}
		if slices.Contains(out, i) {
			return nil, fmt.Errorf("GPU %d is listed twice", i)
		}
		out = append(out, i)
	}
	return out, nil
}

// asksElastic reports whether c asks a resource Elastic places by (in its
// limits or requests).
func asksElastic(c *corev1.Container) bool {
	for _, n := range elasticResources {
		if q, ok := c.Resources.Limits[n]; ok && !q.IsZero() {
			return true
		}
		if q, ok := c.Resources.Requests[n]; ok && !q.IsZero() {
			return true
		}
	}
	return false
}

// elasticValue returns Elastic's annotations on pod as one string, keys
// sorted, that changes when any of them does.
func elasticValue(pod *corev1.Pod) string {
	var kv []string
	for k, v := range pod.Annotations {
		if k == ElasticAssumed || strings.HasPrefix(k, ElasticContainerPrefix) {
			kv = append(kv, k+"="+v)
		}
	}
	slices.Sort(kv)
	return strings.Join(kv, " ")
}
