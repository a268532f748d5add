// Package sim replays a cluster trace through the allocation core with the
// protocol of the FGD paper (Weng et al., ATC'23): pods arrive one at a
// time in a seeded order until 130% of the cluster's GPUs have been asked
// for; a pod that fits nowhere is dropped. It reports the unallocated GPU
// share when arrivals reach 100% and 130% of capacity, fragmentation at 90%,
// and the latency of each placement decision.
//
// The simulator calls alloc.Placer.Pick, the same code the scheduler
// plugin and extender use; it has no policy of its own.
package sim
