// Package v1alpha1 is the versioned configuration of gpushare's resource
// model (apiVersion config.gpushare.io/v1alpha1, kind ResourceModel): which
// extended resource names pods use to ask for GPUs, and what each amount
// means.
//
// A resource has one of four kinds:
//
//   - Memory: GPU memory in MiB or GiB, the total over the container's GPUs.
//   - Compute: a percent of one GPU; 100, 200, ... ask 1, 2, ... whole GPUs.
//   - Count: a number of GPUs; whole GPUs alone, shared ones together with
//     memory or a compute share below 100.
//   - MPS: a number of GPUs shared under NVIDIA MPS (KETI's keti.com/mpsgpu).
//
// The built-in mapping (DefaultResources):
//
//	name                       kind     unit
//	gpushare.io/gpu-mem        Memory   MiB
//	gpushare.io/gpu-core       Compute
//	gpushare.io/gpu-count      Count
//	aliyun.com/gpu-mem         Memory   GiB
//	aliyun.com/gpu-count       Count
//	elasticgpu.io/gpu-memory   Memory   MiB
//	elasticgpu.io/gpu-core     Compute
//	keti.com/mpsgpu            MPS
//
// aliyun.com/gpu-mem follows Aliyun's device plugin, which counts GiB
// unless it runs with --memory-unit=MiB; clusters that run it so list the
// resource with unit MiB. A configured resources list replaces the built-in
// one, so a cluster lists exactly the names it wants gpushare to manage:
//
//	apiVersion: config.gpushare.io/v1alpha1
//	kind: ResourceModel
//	resources:
//	- {name: aliyun.com/gpu-mem, kind: Memory, unit: MiB}
//	- {name: aliyun.com/gpu-count, kind: Count}
//
// MPS containers are shared, never exclusive. Each of their GPUs books
// MPSDefaultCompute percent (default 10, so ten MPS containers share a GPU
// as under KETI's device plugin, which advertises ten keti.com/mpsgpu
// devices per GPU), or the percent in the pod's MPSComputeAnnotation
// (gpushare.io/mps-compute), and the memory in the pod's
// MPSMemoryAnnotation (GPUlimits, KETI's per-GPU memory limit) if set.
//
// Load decodes a file strictly, defaults it and validates it; Validate
// returns field errors such as
//
//	resources[2].unit: Unsupported value: "KiB": supported values: "MiB", "GiB"
package v1alpha1
