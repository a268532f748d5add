package trace

import (
	"fmt"
	"math/rand/v2"
)

// weighted is a value with a relative frequency.
type weighted[T any] struct {
	v T
	w int
}

func draw[T any](r *rand.Rand, xs []weighted[T]) T {
	total := 0
	for _, x := range xs {
		total += x.w
	}
	n := r.IntN(total)
	for _, x := range xs {
		if n < x.w {
			return x.v
		}
		n -= x.w
	}
	return xs[len(xs)-1].v
}

type nodeType struct {
	model     string
	gpus      int
	cpuMilli  int64
	memoryMiB int64
}

// Synthetic returns a seeded cluster of n GPU nodes and a workload whose
// total GPU demand is about the cluster's GPU capacity. The mix follows the
// openb trace's proportions: roughly 13% CPU-only pods, 48% whole single
// GPUs, 38% fractional shares, 1.5% multi-GPU pods, and a fifth of GPU
// pods restricted to some models, over nodes of four GPU models with 1 to 8
// GPUs each.
func Synthetic(seed uint64, n int) ([]Node, []Pod) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	types := []weighted[nodeType]{
		{nodeType{"A100", 8, 96_000, 786_432}, 40},
		{nodeType{"H100", 8, 128_000, 1_048_576}, 8},
		{nodeType{"T4-16G", 2, 64_000, 262_144}, 30},
		{nodeType{"T4-16G", 4, 96_000, 393_216}, 4},
		{nodeType{"L4", 4, 64_000, 393_216}, 12},
		{nodeType{"L4", 1, 32_000, 131_072}, 6},
	}
	nodes := make([]Node, n)
	gpus := 0
	for i := range nodes {
		t := draw(r, types)
		nodes[i] = Node{Name: fmt.Sprintf("node-%04d", i), CPUMilli: t.cpuMilli, MemoryMiB: t.memoryMiB, GPUs: t.gpus, Model: t.model}
		gpus += t.gpus
	}

	shares := []weighted[int64]{{810, 30}, {470, 21}, {320, 9}, {650, 7}, {230, 4}, {460, 4}, {590, 2}, {160, 2}, {550, 2}, {220, 2}, {370, 1}, {110, 1}}
	cpus := []weighted[int64]{{3000, 20}, {4000, 12}, {8000, 15}, {11_000, 20}, {12_000, 12}, {16_000, 8}, {32_000, 5}}
	models := []weighted[[]string]{{nil, 80}, {[]string{"T4-16G"}, 8}, {[]string{"A100", "H100"}, 7}, {[]string{"L4"}, 3}, {[]string{"H100"}, 2}}
	var pods []Pod
	for demand := int64(0); demand < int64(gpus)*1000; {
		p := Pod{Name: fmt.Sprintf("pod-%05d", len(pods)), CPUMilli: draw(r, cpus)}
		p.MemoryMiB = p.CPUMilli * 2
		switch k := r.IntN(1000); {
		case k < 130: // CPU only
		case k < 610:
			p.GPUs, p.GPUMilli = 1, 1000
		case k < 985:
			p.GPUs, p.GPUMilli = 1, draw(r, shares)
		default:
			p.GPUs, p.GPUMilli = draw(r, []weighted[int]{{2, 4}, {4, 3}, {8, 3}}), 1000
			p.CPUMilli = 8000 * int64(p.GPUs)
			p.MemoryMiB = p.CPUMilli * 4
		}
		if p.GPUs > 0 {
			p.Models = draw(r, models)
		}
		demand += p.RequestedMilli()
		pods = append(pods, p)
	}
	return nodes, pods
}
