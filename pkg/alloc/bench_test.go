package alloc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchCluster returns n nodes of 8 x 80 GiB GPUs, about half booked with a
// seeded mix of shares and whole GPUs.
func benchCluster(n int) []*NodeState {
	r := rand.New(rand.NewPCG(1, 2))
	states := make([]*NodeState, n)
	for i := range states {
		node := &Node{Name: fmt.Sprintf("node-%05d", i), CPUMilli: 128_000, MemoryMiB: 1 << 20}
		for g := range 8 {
			node.GPUs = append(node.GPUs, GPU{Index: g, UUID: fmt.Sprintf("GPU-%d-%d", i, g), Model: "A100", MemoryMiB: 81920, Healthy: true, NUMANode: g / 4})
		}
		s := NewNodeState(node)
		for g := range 8 {
			switch r.IntN(4) {
			case 0:
				s.GPUs[g] = Usage{MemoryMiB: 81920, Compute: 100}
			case 1:
				s.GPUs[g] = Usage{MemoryMiB: int64(r.IntN(60000)), Compute: int64(r.IntN(70))}
			}
		}
		s.CPUMilli = int64(r.IntN(64_000))
		states[i] = s
	}
	return states
}

// benchWorkload is a small FGD target workload.
func benchWorkload() []Shape {
	return []Shape{
		{CPUMilli: 4000, Count: 1, Demand: Demand{MemoryMiB: 8192, Compute: 10}, Weight: 40},
		{CPUMilli: 8000, Count: 1, Demand: Demand{MemoryMiB: 40960, Compute: 50}, Weight: 20},
		{CPUMilli: 12_000, Count: 1, Demand: Demand{Exclusive: true}, Weight: 30},
		{CPUMilli: 64_000, Count: 8, Demand: Demand{Exclusive: true}, Weight: 2},
		{CPUMilli: 4000, Weight: 8},
	}
}

// BenchmarkPick measures one placement decision (filter and score of every
// node, then the placement on the best) over 5000 nodes x 8 GPUs; ns/op is
// per decision, ns/node per node rated.
func BenchmarkPick(b *testing.B) {
	benchPick(b, benchCluster(5000), "binpack", "spread", "random", "fgd", "fgd-pack", "fgd-fill")
}

// BenchmarkPickEmpty is the costliest decision of a replay: the openb
// cluster's size (1213 nodes), every node empty, so every node fits and
// is rated in full.
func BenchmarkPickEmpty(b *testing.B) {
	states := benchCluster(1213)
	for _, s := range states {
		clear(s.GPUs)
		s.CPUMilli = 0
	}
	benchPick(b, states, "binpack", "spread", "fgd-pack", "fgd-fill")
}

// benchPick times Pick of a 20 GiB / 30% share over states, per policy.
func benchPick(b *testing.B, states []*NodeState, policies ...string) {
	pod := &PodRequest{Key: "default/bench", CPUMilli: 4000, MemoryMiB: 8192,
		Containers: []PodContainer{{ContainerRequest: ContainerRequest{Name: "main", MemoryMiB: 20480, Compute: 30}}}}
	for _, policy := range policies {
		b.Run(policy, func(b *testing.B) {
			pl, err := NewPlacer(Config{Node: policy, Options: Options{Seed: 42, Workload: benchWorkload()}})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if d := pl.Pick(states, pod, 42); d.Index < 0 {
					b.Fatal("no node fits")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(states)), "ns/node")
		})
	}
}
