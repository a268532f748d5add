// Package resource translates a Kubernetes pod into the allocation core's
// request (alloc.PodRequest), under a resource model configured with
// apis/config/v1alpha1. It is the one translation that every adapter (the
// scheduler plugin, the HTTP extender, the simulator, the kubectl plugin)
// shares; it imports no client, logs nothing and keeps no global state.
//
// # Pod
//
// The key is namespace/name. CPU and memory are the pod's effective
// requests by Kubernetes' rule: the larger of (app containers plus sidecars)
// and the largest init container plus the sidecars declared before it, plus
// the pod overhead; pod-level requests replace the containers' sum where
// set. GPU containers become alloc.PodContainers in spec order: init
// containers (alloc.Sidecar when restartPolicy is Always, else alloc.Init),
// then app containers (alloc.App). Containers that ask no managed resource
// are left out. The models annotation (default gpushare.io/gpu-models,
// "A100|H100" or "A100,H100") restricts every GPU container of the pod.
//
// # Container
//
// An extended resource is read from limits, else requests; both set and
// different is an error. Amounts are positive whole numbers. Memory is
// converted to MiB and is the total over the container's GPUs. With M
// memory, C compute and N count (the names' kinds in the ResourceModel):
//
//	asked              request                                example
//	M                  shared, 1 GPU, M MiB                   aliyun.com/gpu-mem: 3 (GiB) = 3072 MiB
//	C < 100            shared, 1 GPU, C%                      gpushare.io/gpu-core: 30
//	M, C < 100         shared, 1 GPU, M MiB and C%            gpu-mem: 4096, gpu-core: 50
//	C = 100k           exclusive, k whole GPUs                elasticgpu.io/gpu-core: 200 = 2 GPUs
//	N                  exclusive, N whole GPUs                gpushare.io/gpu-count: 2
//	N, M               shared, N GPUs, M/N MiB each           gpu-count: 2, gpu-mem: 8192 = 4096 each
//	N, C < 100         shared, N GPUs, C% each (M/N if M)     gpu-count: 2, gpu-core: 50
//	N, C = 100N        exclusive, N whole GPUs                gpu-count: 2, gpu-core: 200
//	MPS n              shared, n GPUs under MPS               keti.com/mpsgpu: 1
//
// Rejected: C above 100 and not a multiple of 100 (150 would strand half a
// GPU: ask 100, 200 or below 100); M with C >= 100 (whole GPUs carry no
// memory share); N that disagrees with C = 100k; two names of one kind
// (aliyun.com/gpu-mem with gpushare.io/gpu-mem); MPS with any other kind;
// memory per GPU above the largest GPU, once SetLargestGPU has told the
// model its size.
//
// # MPS
//
// keti.com/mpsgpu follows KETI's GPU-Scheduler, where it is a number of
// GPUs, each shared by MPS clients: KETI's device plugin advertises ten
// keti.com/mpsgpu devices per GPU, hands a container its GPUs by the UUIDs
// the scheduler wrote, and limits its memory on each GPU with
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from the pod annotation GPUlimits. It
// sets no per-client compute share. So each GPU of an MPS container books:
//
//   - compute: the pod annotation gpushare.io/mps-compute (1 to 100) if set,
//     else mpsDefaultCompute, 10 by default, which admits the ten clients
//     per GPU that KETI admits. 100 would book the whole GPU for one client
//     and defeat MPS; the booking is for placement, MPS does not enforce it
//     unless the device side sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
//   - memory: GPUlimits (a quantity with a unit, "4Gi") if set, else none.
//
// Errors are *RequestError values that wrap alloc.ErrInvalidRequest.
package resource
