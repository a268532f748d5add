// Package workload learns the mix of pod shapes a cluster runs, online,
// from the pods the scheduler sees, and hands out the allocation core's
// Placer for it: the fragmentation-aware policies weigh fragmentation by
// that mix, so a scheduler runs them with no trace file.
//
// Like pkg/alloc it is pure Go with no Kubernetes imports; the scheduler
// plugin, the HTTP extender and the simulator feed it the same way (each
// GPU pod once, when it is first seen) and so learn the same mix from the
// same pods.
package workload
