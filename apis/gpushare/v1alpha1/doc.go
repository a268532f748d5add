// Package v1alpha1 holds what gpushare stores in the cluster, as versioned
// JSON (apiVersion gpushare.io/v1alpha1):
//
//   - GPUInventory, in the node annotation gpushare.io/gpu-inventory: the
//     node's GPUs as its node daemon sees them. Written by the node daemon
//     (or, for simulated nodes, by whoever creates them); read by the
//     scheduler plugin and the extender.
//   - Allocation, in the pod annotation gpushare.io/allocation: which GPUs,
//     and how much of each, every container of the pod gets. Written by the
//     scheduler in the request that binds the pod; read by the scheduler's cache on
//     restart and by the device plugin when the container starts. It is the
//     truth about what a pod holds.
//
// Nodes opt in with the label gpushare=true. Parse functions decode (unknown
// fields are ignored, so that a newer writer does not stop an older reader)
// and validate; their errors name the field, e.g.
//
//	gpus[1].memoryMiB: Invalid value: 0: must be positive
package v1alpha1
