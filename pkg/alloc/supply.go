package alloc

import (
	"cmp"
	"slices"
)

// Supply is how many healthy GPUs of one kind (model and memory) a
// cluster has. fgd-robust weighs the demand bound to some models against
// their supply: where few GPUs admit much of the workload, pods that
// could go elsewhere should leave those GPUs free.
type Supply struct {
	Model     string
	MemoryMiB int64
	GPUs      int64
}

// CompareSupply orders supplies by model, then memory.
func CompareSupply(a, b Supply) int {
	return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.MemoryMiB, b.MemoryMiB))
}

// SupplyOf counts the nodes' healthy GPUs per kind, sorted by
// CompareSupply.
func SupplyOf(nodes []*Node) []Supply {
	var out []Supply
	for _, n := range nodes {
		for i := range n.GPUs {
			g := &n.GPUs[i]
			if !g.Healthy {
				continue
			}
			kind := Supply{Model: g.Model, MemoryMiB: g.MemoryMiB}
			k, found := slices.BinarySearchFunc(out, kind, CompareSupply)
			if !found {
				out = slices.Insert(out, k, kind)
			}
			out[k].GPUs++
		}
	}
	return out
}

// pressures returns, per demand, how scarce the GPUs that admit it are
// for the share of the workload that needs them, in per-mille: the
// demand's share of the workload's GPU demand over the share of the
// cluster's GPUs whose model it admits (1000: as many GPUs as it needs
// on average). Demands every model admits, or none, get 0: they draw on
// every node alike, or on none.
func (f *fgd) pressures(supply []Supply) []int64 {
	var total int64
	for _, s := range supply {
		total += s.GPUs
	}
	if total == 0 {
		return nil
	}
	demand := make([]float64, len(f.demands)) // Σ weight x GPUs x share per GPU
	admitted := make([]int64, len(f.demands))
	var all float64
	for k := range f.demands {
		d := &f.demands[k]
		var largest int64
		for _, s := range supply {
			if allows(d.Models, s.Model) {
				admitted[k] += s.GPUs
				largest = max(largest, s.MemoryMiB)
			}
		}
		share := float64(1000)
		switch {
		case d.Exclusive:
		case d.Compute > 0:
			share = float64(min(d.Compute*1000/FullCompute, 1000))
		case d.MemoryMiB > 0 && largest > 0:
			share = float64(min(d.MemoryMiB*1000/largest, 1000))
		}
		demand[k] = float64(f.groupGPUs[k]) * max(share, 1)
		all += demand[k]
	}
	if all == 0 {
		return nil
	}
	out := make([]int64, len(f.demands))
	for k := range f.demands {
		if a := admitted[k]; a > 0 && a < total {
			out[k] = int64(1000 * demand[k] / all * float64(total) / float64(a))
		}
	}
	return out
}

// The supply penalty: a pod placed on a node whose pressure p exceeds
// supplyThreshold grows the node's fragmentation by the share it takes
// times (p - supplyThreshold) x supplyWeight, all per-mille. On the openb
// gpuspec workloads (seeds 42-51) threshold 300 and weight 1000 took the
// unallocated GPU % from 4.77/5.75/7.86/13.95 (gpuspec10/20/25/33) to
// 4.76/4.74/5.03/6.91; threshold 0 hurt gpuspec10 (5.00), weight 4000
// gpuspec20 (4.95). Workloads without model-bound pods do not change.
const (
	supplyThreshold = 300
	supplyWeight    = 1000
)
