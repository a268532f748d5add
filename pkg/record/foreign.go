package record

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// Where Aliyun's gpushare scheduler extender records a placement: the
// annotations it writes on a pod at bind, before gpushare took over.
const (
	// AliyunIndex is the GPU index of the pod's aliyun.com/gpu-mem
	// containers.
	AliyunIndex = "ALIYUN_COM_GPU_MEM_IDX"
	// AliyunPod is the pod's app containers' aliyun.com/gpu-mem, in the
	// pod's unit.
	AliyunPod = "ALIYUN_COM_GPU_MEM_POD"
)

// AliyunMemory is the resource through which pods written for Aliyun's
// gpushare ask GPU memory.
const AliyunMemory corev1.ResourceName = "aliyun.com/gpu-mem"

// ErrForeignRecord marks a record of another system that gpushare cannot
// read as a placement. The errors say whose record it is: they wrap
// ErrAliyunRecord, ErrElasticRecord or ErrHAMiRecord, which wrap
// ErrForeignRecord.
var ErrForeignRecord = errors.New("another scheduler's placement record")

// The records of each system gpushare adopts; check with errors.Is.
var (
	ErrAliyunRecord  error = &systemRecord{"the placement record of Aliyun's gpushare"}
	ErrElasticRecord error = &systemRecord{"the placement record of Elastic GPU Scheduler"}
	ErrHAMiRecord    error = &systemRecord{"the placement record of HAMi"}
)

// gpuName names a GPU of a record by UUID, else index.
func gpuName(s *gpusharev1.GPUShare) string {
	if s.UUID != "" {
		return s.UUID
	}
	return strconv.Itoa(s.Index)
}

type systemRecord struct{ msg string }

func (e *systemRecord) Error() string { return e.msg }
func (e *systemRecord) Unwrap() error { return ErrForeignRecord }

// Recorded reports whether pod carries a record of where its GPUs are:
// gpushare's, or one of another system that gpushare adopts.
func Recorded(pod *corev1.Pod) bool {
	_, own := pod.Annotations[gpusharev1.AllocationAnnotation]
	return own || Foreign(pod) != nil
}

// Foreign returns the error that names whose adopted record pod carries
// (ErrAliyunRecord, ErrElasticRecord, ErrHAMiRecord), or nil for none.
// Aliyun's comes first where a pod has several, then Elastic's.
func Foreign(pod *corev1.Pod) error {
	if _, ok := pod.Annotations[AliyunIndex]; ok {
		return ErrAliyunRecord
	}
	if _, ok := pod.Annotations[ElasticAssumed]; ok {
		return ErrElasticRecord
	}
	if _, ok := pod.Annotations[HAMiAllocated]; ok {
		return ErrHAMiRecord
	}
	return nil
}

// ForeignAllocation translates the record another system left on pod
// (Foreign) into gpushare's: AliyunAllocation or ElasticAllocation.
func ForeignAllocation(pod *corev1.Pod, req *alloc.PodRequest) (*gpusharev1.Allocation, error) {
	switch sys := Foreign(pod); {
	case errors.Is(sys, ErrAliyunRecord):
		return AliyunAllocation(pod, req)
	case errors.Is(sys, ErrElasticRecord):
		return ElasticAllocation(pod, req)
	case errors.Is(sys, ErrHAMiRecord):
		return HAMiAllocation(pod, req)
	}
	return nil, fmt.Errorf("%w: the pod has none", ErrForeignRecord)
}

// ForeignValue returns the annotations of the record another system left
// on pod, as one string that changes when any of them does, and whether
// pod has one.
func ForeignValue(pod *corev1.Pod) (string, bool) {
	switch sys := Foreign(pod); {
	case errors.Is(sys, ErrAliyunRecord):
		return AliyunIndex + "=" + pod.Annotations[AliyunIndex] + " " + AliyunPod + "=" + pod.Annotations[AliyunPod], true
	case errors.Is(sys, ErrElasticRecord):
		return elasticValue(pod), true
	case errors.Is(sys, ErrHAMiRecord):
		return HAMiNode + "=" + pod.Annotations[HAMiNode] + " " + HAMiAllocated + "=" + pod.Annotations[HAMiAllocated], true
	}
	return "", false
}

// AliyunAllocation translates the placement Aliyun's scheduler extender
// recorded on pod into gpushare's record, as gpushare would have written
// it: each container of req that asks aliyun.com/gpu-mem on GPU
// ALIYUN_COM_GPU_MEM_IDX of the pod's node with the share req gives it.
// Aliyun's extender puts a pod on one GPU, named by its index (an integer),
// and books the containers' aliyun.com/gpu-mem there; ALIYUN_COM_GPU_MEM_POD,
// where present, must be the app containers' sum as asked. The GPUs are
// named by index only: their UUIDs are left empty for OnNode to fill in
// from the node. req is the pod's request as the resource model translates
// it (GiB, or MiB in a namespace whose unit is MiB), so a record whose pod
// asks other GPU resources too does not conform to it.
func AliyunAllocation(pod *corev1.Pod, req *alloc.PodRequest) (*gpusharev1.Allocation, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrAliyunRecord, fmt.Sprintf(format, args...))
	}
	v := pod.Annotations[AliyunIndex]
	idx, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || idx < 0 {
		return nil, fail("%s=%q is not one GPU index", AliyunIndex, v)
	}
	asks := map[string]bool{}
	for i := range pod.Spec.InitContainers {
		if _, ok := AliyunAmount(&pod.Spec.InitContainers[i]); ok {
			asks[pod.Spec.InitContainers[i].Name] = true
		}
	}
	for i := range pod.Spec.Containers {
		if _, ok := AliyunAmount(&pod.Spec.Containers[i]); ok {
			asks[pod.Spec.Containers[i].Name] = true
		}
	}
	podAmount := AliyunPodAmount(pod)
	if len(asks) == 0 {
		return nil, fail("the pod asks no %s", AliyunMemory)
	}
	if s, ok := pod.Annotations[AliyunPod]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n != podAmount {
			return nil, fail("%s=%q, the pod's containers ask %d of %s", AliyunPod, s, podAmount, AliyunMemory)
		}
	}
	a := &gpusharev1.Allocation{Node: pod.Spec.NodeName}
	for i := range req.Containers {
		c := &req.Containers[i]
		if !asks[c.Name] {
			continue
		}
		d := c.PerGPU()
		a.Containers = append(a.Containers, gpusharev1.ContainerAllocation{Name: c.Name, Kind: kinds[c.Kind],
			GPUs: []gpusharev1.GPUShare{{Index: idx, MemoryMiB: d.MemoryMiB, Compute: d.Compute}}})
	}
	return a, nil
}

// AliyunAmount is what c asks of aliyun.com/gpu-mem (its limit, else its
// request), in the pod's unit, and whether it asks any.
func AliyunAmount(c *corev1.Container) (int64, bool) {
	q, ok := c.Resources.Limits[AliyunMemory]
	if !ok {
		q, ok = c.Resources.Requests[AliyunMemory]
	}
	return q.Value(), ok && !q.IsZero()
}

// AliyunPodAmount is the pod's app containers' aliyun.com/gpu-mem, in the
// pod's unit: what Aliyun's ALIYUN_COM_GPU_MEM_POD says.
func AliyunPodAmount(pod *corev1.Pod) int64 {
	var n int64
	for i := range pod.Spec.Containers {
		if q, ok := AliyunAmount(&pod.Spec.Containers[i]); ok {
			n += q
		}
	}
	return n
}

// OnNode returns a copy of a, another system's record translated
// (ForeignAllocation), placed on a node's GPUs: each GPU named by index
// gets the UUID of the GPU at that index, each named by UUID the index of
// the GPU with that UUID. The containers req asks whole GPUs for get the
// whole GPU (its memory and compute), those it asks a percent of GPU
// memory for that percent of the GPU: only the node knows their sizes.
func OnNode(a *gpusharev1.Allocation, req *alloc.PodRequest, gpus []alloc.GPU) (*gpusharev1.Allocation, error) {
	want := map[string]*alloc.ContainerRequest{}
	for i := range req.Containers {
		want[req.Containers[i].Name] = &req.Containers[i].ContainerRequest
	}
	out := *a
	out.Containers = make([]gpusharev1.ContainerAllocation, len(a.Containers))
	for i, c := range a.Containers {
		c.GPUs = append([]gpusharev1.GPUShare(nil), c.GPUs...)
		for k := range c.GPUs {
			s := &c.GPUs[k]
			j := slices.IndexFunc(gpus, func(g alloc.GPU) bool { return g.Index == s.Index })
			if s.UUID != "" {
				j = slices.IndexFunc(gpus, func(g alloc.GPU) bool { return g.UUID == s.UUID })
			}
			if j < 0 {
				return nil, fmt.Errorf("container %s: node %s has no GPU %s", c.Name, a.Node, gpuName(s))
			}
			g := &gpus[j]
			s.Index, s.UUID = g.Index, g.UUID
			switch r := want[c.Name]; {
			case r == nil:
			case r.Exclusive:
				s.MemoryMiB, s.Compute = g.MemoryMiB, g.ComputeCapacity()
			case r.MemoryPercent > 0:
				s.MemoryMiB = alloc.PercentOf(g.MemoryMiB, r.MemoryPercent)
			}
		}
		out.Containers[i] = c
	}
	return &out, nil
}
