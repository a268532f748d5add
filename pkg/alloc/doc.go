// Package alloc is gpushare's allocation core: the model of nodes and GPUs,
// container and pod GPU requests, fit with reasons as data, placement of each
// container onto GPUs, and the scoring policies that choose among nodes and
// GPUs.
//
// The package is pure Go with no Kubernetes or NVIDIA imports; the scheduler
// plugin, the HTTP extender, the node daemon and the simulator all translate
// into these types and call the same functions. Nothing here logs, keeps
// global state, or reads a clock.
//
// Units are integers: MiB for memory, milli-CPU for CPU, percent of one GPU
// for compute (a GPU has 100). Policies compare GPU shares in per-mille of a
// GPU (see FreeShare).
//
// Determinism: Place and Pick return the same result for the same input. GPU
// ties are broken by the lowest GPU index; node ties by a hash of
// (seed, pod key, node name), which is as fair as a random choice and as
// repeatable as a sort (see Pick).
package alloc
