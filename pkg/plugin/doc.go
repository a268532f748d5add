// Package plugin is gpushare's kube-scheduler framework plugin, GPUShare.
// It is a thin adapter: the resource model turns the pod into a request,
// the allocation core places it on each node, and the cache holds what
// pods hold; package decision holds what it decides as the extender does,
// package binding how both bind. Build the plugin factory with
// New(NewShared(...)): one Shared serves every profile. Extension points:
//
//   - PreFilter: translate the pod; skip pods that ask for no GPU; reject
//     malformed requests with the resource model's message.
//   - PreFilterExtensions (AddPod / RemovePod): note on the cycle state
//     the pods kube-scheduler adds to or removes from a node for
//     nominated pods and preemption's dry runs (see preemption.go).
//   - Filter: place the pod on the node's GPUs, or say why not; on a
//     node AddPod or RemovePod changed, on a copy of its state with
//     those changes, keeping preemption to one victim plan.
//   - PostFilter: sum up why no node fits, in numbers, for the pod event.
//   - Score: the node policy's rating, ranked by NormalizeScore.
//   - Reserve / Unreserve: book the placement in the cache / drop it.
//   - Bind: bind the pod and record its allocation (the annotation
//     gpushare.io/allocation, and Aliyun's for pods that ask
//     aliyun.com/gpu-mem) in one Binding request; PostBind records it
//     afterwards if another bind plugin bound the pod first.
package plugin
