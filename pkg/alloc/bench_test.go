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

// robustCluster is n nodes of the openb trace's three commonest kinds,
// about half booked: 8 G2 GPUs and 96 CPUs, 2 T4s and 104 CPUs, 2 P100s
// and 16 CPUs.
func robustCluster(n int) []*NodeState {
	r := rand.New(rand.NewPCG(3, 4))
	kinds := []struct {
		model string
		gpus  int
		cpu   int64
	}{{"G2", 8, 96_000}, {"G2", 8, 96_000}, {"T4", 2, 104_000}, {"P100", 2, 16_000}}
	states := make([]*NodeState, n)
	for i := range states {
		k := kinds[r.IntN(len(kinds))]
		node := &Node{Name: fmt.Sprintf("node-%05d", i), CPUMilli: k.cpu, MemoryMiB: 512 << 10}
		for g := range k.gpus {
			node.GPUs = append(node.GPUs, GPU{Index: g, UUID: fmt.Sprintf("GPU-%d-%d", i, g), Model: k.model, MemoryMiB: 16384, Healthy: true, NUMANode: -1})
		}
		s := NewNodeState(node)
		for g := range k.gpus {
			switch r.IntN(3) {
			case 0:
				s.GPUs[g] = Usage{MemoryMiB: 16384, Compute: 100}
			case 1:
				s.GPUs[g] = Usage{Compute: int64(10 * (1 + r.IntN(9)))}
			}
		}
		s.CPUMilli = int64(r.IntN(int(k.cpu / 2)))
		states[i] = s
	}
	return states
}

// robustWorkload is a learned mix as fgd-robust weighs it online on the
// openb gpuspec workloads: about a hundred shapes of GPU shares, whole
// and multi-GPU pods and pods without GPUs, a quarter bound to models.
func robustWorkload() []Shape {
	r := rand.New(rand.NewPCG(5, 6))
	models := [][]string{nil, nil, nil, {"T4"}, {"P100"}, {"G2", "P100"}}
	var shapes []Shape
	for range 100 {
		sh := Shape{CPUMilli: int64(1+r.IntN(16)) * 1000, MemoryMiB: int64(r.IntN(64)) << 10, Weight: int64(1 + r.IntN(100))}
		switch r.IntN(10) {
		case 0:
		case 1:
			sh.Count, sh.Demand = 1<<r.IntN(4), Demand{Exclusive: true}
		case 2, 3:
			sh.Count, sh.Demand = 1, Demand{Exclusive: true}
		default:
			sh.Count, sh.Demand = 1, Demand{Compute: []int64{23, 32, 47, 47, 65, 81}[r.IntN(6)]}
		}
		if sh.Count > 0 {
			sh.Demand.Models = models[r.IntN(len(models))]
		}
		shapes = append(shapes, sh)
	}
	return shapes
}

// BenchmarkPickRobust measures the default policy's decisions at the
// openb cluster's size (1213 nodes) with a learned mix that binds demand
// to models: a GPU share, a share bound to a model, a pod without GPUs,
// and a decision that first refreshes the supply (Resupply), as the
// scheduler does every workload.SupplyRefresh pods.
func BenchmarkPickRobust(b *testing.B) {
	states := robustCluster(1213)
	share := &PodRequest{Key: "default/share", CPUMilli: 4000, MemoryMiB: 8192,
		Containers: []PodContainer{{ContainerRequest: ContainerRequest{Name: "main", Compute: 47}}}}
	bound := &PodRequest{Key: "default/bound", CPUMilli: 8000, MemoryMiB: 8192,
		Containers: []PodContainer{{ContainerRequest: ContainerRequest{Name: "main", Compute: 32, Models: []string{"T4"}}}}}
	cpu := &PodRequest{Key: "default/cpu", CPUMilli: 12_000, MemoryMiB: 57344}
	pl, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Seed: 42, Workload: robustWorkload(), Supply: SupplyLeft(states)}})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		pod     *PodRequest
		refresh bool
	}{{"share", share, false}, {"bound", bound, false}, {"cpu", cpu, false}, {"refresh", share, true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				pl := pl
				if tc.refresh {
					if pl, err = pl.Resupply(SupplyLeft(states)); err != nil {
						b.Fatal(err)
					}
				}
				if d := pl.Pick(states, tc.pod, 42); d.Index < 0 {
					b.Fatal("no node fits")
				}
			}
		})
	}
}

// BenchmarkSpareRoom: the walk a policy that keeps idle GPUs spare makes
// over the openb cluster's nodes every workload.SupplyRefresh pods.
// "memo": every node's summary is fresh, as after the nodes were rated
// (the simulator rates every node for each pod); "walk": none is.
func BenchmarkSpareRoom(b *testing.B) {
	sp := SpareOf(robustWorkload(), 16384)
	for _, memo := range []bool{false, true} {
		name := map[bool]string{false: "walk", true: "memo"}[memo]
		b.Run(name, func(b *testing.B) {
			states := robustCluster(1213)
			for _, s := range states {
				if memo {
					s.summary()
				} else {
					s.memo = nil
				}
			}
			for b.Loop() {
				var r Room
				for _, s := range states {
					sp.Add(&r, s)
				}
			}
		})
	}
}
