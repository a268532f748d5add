package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Group, version and kind of the resource model configuration.
const (
	GroupName  = "config.gpushare.io"
	Version    = "v1alpha1"
	APIVersion = GroupName + "/" + Version
	Kind       = "ResourceModel"
)

// ResourceModel maps the extended resource names that pods ask for onto
// gpushare's request model: GPU memory, a compute share, a GPU count, or
// GPUs shared under NVIDIA MPS.
type ResourceModel struct {
	metav1.TypeMeta `json:",inline"`

	// Resources lists the extended resources gpushare manages. When set it
	// replaces the built-in list (see Default) rather than adding to it, so
	// names another scheduler manages stay out of ours.
	Resources []Resource `json:"resources,omitempty"`

	// ModelsAnnotation is the pod annotation that lists the GPU models a
	// pod accepts, separated by "|" or ",". Default gpushare.io/gpu-models.
	ModelsAnnotation string `json:"modelsAnnotation,omitempty"`

	// MPSDefaultCompute is the percent of each GPU booked for an MPS
	// container whose pod does not set MPSComputeAnnotation. 1 to 100;
	// default 10 (see DefaultMPSCompute).
	MPSDefaultCompute *int64 `json:"mpsDefaultCompute,omitempty"`

	// MPSComputeAnnotation is the pod annotation that overrides
	// MPSDefaultCompute for the pod's MPS containers: a whole percent,
	// 1 to 100. Default gpushare.io/mps-compute.
	MPSComputeAnnotation string `json:"mpsComputeAnnotation,omitempty"`

	// MPSMemoryAnnotation is the pod annotation that gives the GPU memory
	// of each GPU of an MPS container, as a Kubernetes quantity with a unit
	// ("4Gi", "3500Mi"). Default GPUlimits, the annotation KETI's
	// GPU-Scheduler and device plugin read (the plugin passes it on as
	// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT). Without it an MPS container books
	// compute only.
	MPSMemoryAnnotation string `json:"mpsMemoryAnnotation,omitempty"`

	// UnitOverrides give a Memory resource another unit for pods in some
	// namespaces: for a cluster where one team's pods count
	// aliyun.com/gpu-mem in GiB (the Aliyun system's default) and another's in
	// MiB (the Aliyun system with --memory-unit=MiB).
	UnitOverrides []UnitOverride `json:"unitOverrides,omitempty"`
}

// UnitOverride is the unit of one Memory resource in some namespaces.
type UnitOverride struct {
	// Name is a Memory resource of Resources.
	Name corev1.ResourceName `json:"name"`
	// Unit is MiB or GiB.
	Unit MemoryUnit `json:"unit"`
	// Namespaces are the namespaces whose pods use Unit.
	Namespaces []string `json:"namespaces"`
}

// Resource is one managed extended resource.
type Resource struct {
	// Name is the extended resource name, e.g. aliyun.com/gpu-mem.
	Name corev1.ResourceName `json:"name"`
	// Kind says what the amount means.
	Kind ResourceKind `json:"kind"`
	// Unit is the unit of a Memory or MemoryPerGPU resource: MiB (default)
	// or GiB. Other kinds take no unit.
	Unit MemoryUnit `json:"unit,omitempty"`
}

// ResourceKind says what the amount of a resource means.
type ResourceKind string

// Resource kinds.
const (
	// KindMemory is GPU memory, in Unit, the total over the container's
	// GPUs.
	KindMemory ResourceKind = "Memory"
	// KindCompute is a percent of one GPU; a multiple of 100 asks that many
	// whole GPUs.
	KindCompute ResourceKind = "Compute"
	// KindCount is a number of GPUs: whole GPUs alone, shared GPUs with
	// memory or a compute share below 100.
	KindCount ResourceKind = "Count"
	// KindMPS is a number of GPUs shared under NVIDIA MPS.
	KindMPS ResourceKind = "MPS"

	// The per-GPU kinds follow HAMi, whose amounts are for each of a
	// container's GPUs (nvidia.com/gpu, the count, defaults to 1) and whose
	// defaults fill what a container leaves out: no memory asks all of each
	// GPU's memory, and then no compute asks the whole GPU.

	// KindMemoryPerGPU is GPU memory, in Unit, on each of the container's
	// GPUs (HAMi's nvidia.com/gpumem).
	KindMemoryPerGPU ResourceKind = "MemoryPerGPU"
	// KindMemoryPercent is a percent of the memory of each of the
	// container's GPUs, 1 to 100, whatever its size (HAMi's
	// nvidia.com/gpumem-percentage); ignored beside a MemoryPerGPU amount.
	KindMemoryPercent ResourceKind = "MemoryPercent"
	// KindComputePerGPU is a percent of each of the container's GPUs
	// (HAMi's nvidia.com/gpucores); 100 or more takes each GPU whole.
	KindComputePerGPU ResourceKind = "ComputePerGPU"
)

// PerGPU reports whether k is one of HAMi's per-GPU kinds.
func (k ResourceKind) PerGPU() bool {
	return k == KindMemoryPerGPU || k == KindMemoryPercent || k == KindComputePerGPU
}

// Memory reports whether k asks GPU memory: Memory or MemoryPerGPU, the
// kinds that take a Unit.
func (k ResourceKind) Memory() bool { return k == KindMemory || k == KindMemoryPerGPU }

// MemoryUnit is the unit of a Memory resource.
type MemoryUnit string

// Memory units.
const (
	MiB MemoryUnit = "MiB"
	GiB MemoryUnit = "GiB"
)
