package alloc

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFGDFillCountsStrandedGPUs: fgd-fill counts the free share that a
// stream of the workload's pods could not use because the node's CPU runs
// out first, which fgd (one pod fits, so nothing is fragmented) does not.
func TestFGDFillCountsStrandedGPUs(t *testing.T) {
	shapes := []Shape{{CPUMilli: 10_000, Count: 1, Demand: Demand{MemoryMiB: 8000, Compute: 50}, Weight: 1}}
	lean := makeNode("lean").gpus(2, "G", 16000).cpu(40_000)
	rich := makeNode("rich").gpus(2, "G", 16000).cpu(100_000)
	pod := makePod("p").cpu(20_000).shared("main", 8000, 50).obj()

	// After the pod, lean has 1.5 GPUs free (room for 3 more pods) but 20
	// CPUs (for 2): the workload can use 1 GPU of it, 0.5 is stranded.
	after := lean.state(Usage{MemoryMiB: 8000, Compute: 50})
	after.CPUMilli = 20_000
	for _, c := range []struct {
		mode fgdMode
		want int64
	}{{fgdFill, 500}, {fgdPlain, 0}} {
		f := newFGDShapes(shapes)
		f.mode = c.mode
		var b fragBase
		f.fill(&b, after)
		if got := f.frag(&b, after.FreeCPU(), after.FreeMemory()); got != c.want {
			t.Errorf("mode %d: fragmentation of lean after the pod = %d, want %d", c.mode, got, c.want)
		}
	}

	pl, err := NewPlacer(Config{Node: "fgd-fill", Options: Options{Seed: 1, Workload: shapes}})
	if err != nil {
		t.Fatal(err)
	}
	for _, order := range [][]*nodeBuilder{{lean, rich}, {rich, lean}} {
		states := []*NodeState{order[0].state(), order[1].state()}
		d := pl.Pick(states, pod, 1)
		if d.Placement == nil {
			t.Fatalf("no placement: %v", d)
		}
		if got := states[d.Index].Node.Name; got != "rich" {
			t.Errorf("nodes %s, %s: fgd-fill chose %s, want rich (lean would strand half a GPU)", order[0].n.Name, order[1].n.Name, got)
		}
	}
}

// TestFGDRobustKeepsScarceModelFree: a pod any GPU takes goes to the node
// whose model no model-bound shape needs, though the other node is smaller
// (fewer GPUs first would choose it) and the model signal, a twentieth of
// half a GPU, is below fgd-fill's rounding.
func TestFGDRobustKeepsScarceModelFree(t *testing.T) {
	shapes := []Shape{
		{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 50}, Weight: 19},
		{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 50, Models: []string{"T4"}}, Weight: 1},
	}
	scarce := makeNode("scarce").gpus(2, "T4", 16000)
	common := makeNode("common").gpus(4, "G2", 16000)
	pod := makePod("p").cpu(1000).shared("main", 0, 50).obj()
	for _, c := range []struct{ policy, want string }{{"fgd-fill", "scarce"}, {"fgd-robust", "common"}} {
		pl, err := NewPlacer(Config{Node: c.policy, Options: Options{Seed: 1, Workload: shapes}})
		if err != nil {
			t.Fatal(err)
		}
		for _, order := range [][]*nodeBuilder{{scarce, common}, {common, scarce}} {
			states := []*NodeState{order[0].state(), order[1].state()}
			d := pl.Pick(states, pod, 1)
			if d.Placement == nil {
				t.Fatalf("%s: no placement: %v", c.policy, d)
			}
			if got := states[d.Index].Node.Name; got != c.want {
				t.Errorf("%s, nodes %s, %s: chose %s, want %s", c.policy, order[0].n.Name, order[1].n.Name, got, c.want)
			}
		}
	}
}

// TestFGDRobustCountsCPUForTheMix: fgd-robust caps the usable share by the
// CPU the workload's mix needs, not each shape's own: a node with room for
// two CPU-heavy pods strands no GPU when most pods need little CPU.
func TestFGDRobustCountsCPUForTheMix(t *testing.T) {
	shapes := []Shape{
		{CPUMilli: 20_000, Count: 1, Demand: Demand{Exclusive: true}, Weight: 1},
		{CPUMilli: 2_000, Count: 1, Demand: Demand{Exclusive: true}, Weight: 3},
	}
	s := makeNode("n").gpus(4, "G", 16000).cpu(40_000).state()
	// fgd-fill: the heavy shape alone uses 2 of the 4 GPUs (2000 x 1).
	// fgd-robust: the mix needs 26 CPUs per 4 GPUs; 40 feed them all.
	// With 10 CPUs the heavy shape fits no pod (4000 x 1) and the mix
	// feeds 10 x 4000 / 26 = 1538 of 4000 ((4000 - 1538) x 3).
	for _, c := range []struct {
		mode fgdMode
		cpu  int64
		want int64
	}{{fgdFill, 40_000, 2000}, {fgdRobust, 40_000, 0}, {fgdRobust, 10_000, 4000 + 3*(4000-1538)}} {
		f := newFGDShapes(shapes)
		f.mode = c.mode
		var b fragBase
		f.fill(&b, s)
		if got := f.frag(&b, c.cpu, s.FreeMemory()); got != c.want {
			t.Errorf("mode %d, %d CPU: fragmentation = %d, want %d", c.mode, c.cpu, got, c.want)
		}
	}
}

// TestFGDRobustBreaksTiesByGPUFragmentation: when two nodes' growth rounds
// the same, fgd-robust takes the one whose GPUs the pod fragments less,
// whatever the nodes' names (the tie-break after it). The mix is pods of
// 0.4 and 0.25 GPU; the pod takes 0.28. On x (0.45 free) it leaves 0.17,
// which fits neither: growth 0.09 over the two shapes, 0.045 per pod. On
// y (0.76 free) it leaves 0.48, which fits one of each: -0.06, -0.03 per
// pod. Both round to 0.
func TestFGDRobustBreaksTiesByGPUFragmentation(t *testing.T) {
	shapes := []Shape{
		{Count: 1, Demand: Demand{Compute: 40}, Weight: 1},
		{Count: 1, Demand: Demand{Compute: 25}, Weight: 1},
	}
	pl, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Seed: 1, Workload: shapes}})
	if err != nil {
		t.Fatal(err)
	}
	pod := makePod("p").shared("main", 0, 28).obj()
	for _, names := range tiePairs {
		x := makeNode(names[0]).gpus(1, "G", 16000).state(Usage{Compute: 55})
		y := makeNode(names[1]).gpus(1, "G", 16000).state(Usage{Compute: 24})
		checkPick(t, pl, pod, x, y, "x with 0.45 free, y with 0.76")
	}
}

// tiePairs name the two nodes of a test in which they tie but for one
// tie-break: the name bits, the last, cannot then decide all of them.
var tiePairs = [][2]string{{"x", "y"}, {"a", "b"}, {"node-1", "node-2"}, {"gpu-0", "gpu-1"}, {"m", "n"}, {"p", "q"}}

// checkPick places pod on nodes x and y, in both orders, and fails
// unless it lands on y.
func checkPick(t *testing.T, pl *Placer, pod *PodRequest, x, y *NodeState, what string) {
	t.Helper()
	for _, states := range [][]*NodeState{{x, y}, {y, x}} {
		d := pl.Pick(states, pod, 1)
		if d.Placement == nil {
			t.Fatalf("no placement: %v", d)
		}
		if got := states[d.Index].Node.Name; got != y.Node.Name {
			t.Errorf("%s (x %s, y %s, in that order: %t): chose %s, want y", what, x.Node.Name, y.Node.Name, states[0] == x, got)
		}
	}
}

// TestFGDRobustTieBreakLeavesCPUOut: the last tie-break counts the GPUs'
// fragmentation without the node's CPU. Node x has two idle GPUs and just
// the pod's CPU: with CPU counted, the pod uses GPU share that x's CPU
// would strand anyway (growth -0.42 over the two shapes); without it, it
// breaks into an idle GPU (+0.25). Node y has plenty of CPU and a quarter
// of a GPU used: -0.33 with CPU, -0.25 without. Both round to -0.2 per
// pod, so the GPUs alone decide: y. (Counting CPU in this tie-break cost
// the CPU-heavy openb workload cpu250 0.11 points.)
func TestFGDRobustTieBreakLeavesCPUOut(t *testing.T) {
	shapes := []Shape{
		{CPUMilli: 8000, Count: 1, Demand: Demand{Compute: 50}, Weight: 1},
		{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 25}, Weight: 1},
	}
	pl, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Seed: 1, Workload: shapes}})
	if err != nil {
		t.Fatal(err)
	}
	pod := makePod("p").cpu(1000).shared("main", 0, 25).obj()
	for _, names := range tiePairs {
		x := makeNode(names[0]).gpus(2, "G", 16000).cpu(1000).state()
		y := makeNode(names[1]).gpus(2, "G", 16000).cpu(12_000).state(Usage{Compute: 25})
		checkPick(t, pl, pod, x, y, "x with idle GPUs and the pod's CPU, y a quarter used with 12 CPUs")
	}
}

// TestFGDRobustKeepsCPUForGPUs: the mix asks 7 CPUs per GPU. Node x has
// 20 CPUs for its two idle GPUs, CPU to spare; node y 6, enough to feed
// 0.86 GPU of its two. A pod of half a GPU and 1 CPU grows their
// fragmentation alike (rounded), and they tie on the later tie-breaks
// but the name: the CPU tie-break sends it to y, where it uses GPU share
// that y's CPU could not feed, and leaves x's CPU for the CPU-heavy pods.
func TestFGDRobustKeepsCPUForGPUs(t *testing.T) {
	shapes := []Shape{
		{CPUMilli: 6000, Count: 1, Demand: Demand{Compute: 50}, Weight: 1},
		{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 50}, Weight: 1},
	}
	pl, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Seed: 1, Workload: shapes}})
	if err != nil {
		t.Fatal(err)
	}
	pod := makePod("light").cpu(1000).shared("main", 0, 50).obj()
	for _, names := range tiePairs {
		x := makeNode(names[0]).gpus(2, "G", 16000).cpu(20_000).state()
		y := makeNode(names[1]).gpus(2, "G", 16000).cpu(6000).state()
		checkPick(t, pl, pod, x, y, "x with CPU to spare, y short of CPU")
	}
}

// TestCPUBalance: the tie-break weighs the CPU the GPU pods ask per GPU,
// unless the whole mix, pods without GPUs included, asks more CPU per GPU
// than the cluster has.
func TestCPUBalance(t *testing.T) {
	gpuPods := []Shape{
		{CPUMilli: 6000, Count: 1, Demand: Demand{Compute: 50}, Weight: 1},     // 12 CPUs per GPU
		{CPUMilli: 8000, Count: 2, Demand: Demand{Exclusive: true}, Weight: 1}, // 4 per GPU
	}
	// (6 + 8) CPUs for 2.5 GPUs.
	const asked = 5600
	supply := []Supply{{Model: "G", GPUs: 10, CPUMilli: 80_000}} // 8 CPUs per GPU
	noCPU := []Shape{{Count: 1, Demand: Demand{Compute: 50}, Weight: 1}}
	// A pod of 8 GiB of a 32 GiB GPU, 3 CPUs: 12 per GPU.
	memory := []Shape{{CPUMilli: 3000, Count: 1, Demand: Demand{MemoryMiB: 8192}, Weight: 1}}
	cases := []struct {
		what          string
		workload, mix []Shape
		shelf         []Supply
		want          int64
	}{
		{"no supply", gpuPods, nil, nil, asked},
		{"CPU to spare", gpuPods, nil, supply, asked},
		{"pods without GPUs, CPU still to spare", gpuPods, append(slices.Clone(gpuPods), Shape{CPUMilli: 2000, Weight: 3}), supply, asked},
		{"pods without GPUs take it past the supply", gpuPods, append(slices.Clone(gpuPods), Shape{CPUMilli: 2000, Weight: 5}), supply, 0},
		{"a supply without CPU counted", gpuPods, append(slices.Clone(gpuPods), Shape{CPUMilli: 2000, Weight: 5}), []Supply{{Model: "G", GPUs: 10}}, asked},
		{"no CPU asked", noCPU, nil, supply, 0},
		{"GPU memory asked, on the supply's largest GPU", memory, nil, []Supply{{Model: "G", MemoryMiB: 32768, GPUs: 10, CPUMilli: 200_000}}, 12_000},
	}
	for _, c := range cases {
		mix := c.mix
		if mix == nil {
			mix = c.workload
		}
		if got := cpuBalance(c.workload, mix, c.shelf); got != c.want {
			t.Errorf("%s: %d milli-CPU per GPU, want %d", c.what, got, c.want)
		}
	}
}

// TestFGDRobustKeepsFragmentationWithTheCPU: the fragmentation of a node
// kept between decisions follows a booking that takes CPU and no GPU
// (the node's memo, which follows GPU usage alone, stays): the node is
// rated as a fresh copy of it is, before and after.
func TestFGDRobustKeepsFragmentationWithTheCPU(t *testing.T) {
	workload := []Shape{
		{CPUMilli: 4000, Count: 1, Demand: Demand{Exclusive: true}, Weight: 2},
		{CPUMilli: 2000, Count: 1, Demand: Demand{Compute: 50}, Weight: 1},
	}
	pl, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Workload: workload}})
	if err != nil {
		t.Fatal(err)
	}
	states := []*NodeState{makeNode("a").cpu(16_000).gpus(4, "T4", 15360).state(Usage{Compute: 50})}
	pod := makePod("p").cpu(2000).shared("main", 0, 50).obj()
	rate := func(step string) Score {
		d, fresh := pl.Pick(states, pod, 1), pl.Pick(clones(states), pod, 1)
		if d.Placement == nil || fresh.Placement == nil || d.Placement.Score != fresh.Placement.Score {
			t.Fatalf("%s: rated %+v, a fresh copy %+v", step, d.Placement, fresh.Placement)
		}
		return d.Placement.Score
	}
	before := rate("first")
	if err := states[0].Apply(&Placement{Node: "a", CPUMilli: 10_000}); err != nil {
		t.Fatal(err)
	}
	if after := rate("after 10 CPUs booked"); after == before {
		t.Errorf("10 of 16 CPUs booked: score %+v unchanged (the premise of the test)", after)
	}
}

// fragFillReference is fgd-fill's and fgd-robust's fragmentation as the
// policy defines it, shape by shape, without the packed terms, the
// admission kept per GPU, or the two sums in one pass: what fragFill
// must equal.
func fragFillReference(f *fgd, s *NodeState, cpu, mem int64, withCPU bool) int64 {
	units := make([]int64, len(f.demands))
	used := make([]int64, len(f.demands))
	var total int64
	for _, v := range s.freeShares(nil) {
		total += v
	}
	for k := range f.demands {
		for i := range s.GPUs {
			if g := &s.Node.GPUs[i]; admits(g, &f.demands[k]) {
				n, sh := unitsOn(g, s.GPUs[i], &f.demands[k])
				units[k] += n
				used[k] += sh
			}
		}
	}
	room := int64(-1)
	if f.mode == fgdRobust && withCPU {
		var perCPU, share int64
		for k := range f.demands {
			if units[k] > 0 {
				perCPU += f.groupCPU[k]
				share += f.groupGPUs[k] * used[k] / units[k]
			}
		}
		if perCPU > 0 {
			// The share the CPU feeds, exact (big.Int's Quo truncates
			// toward zero), saturating as int64.
			r := new(big.Int).Quo(new(big.Int).Mul(big.NewInt(cpu), big.NewInt(share)), big.NewInt(perCPU))
			switch {
			case r.IsInt64():
				room = r.Int64()
			case r.Sign() > 0:
				room = math.MaxInt64
			default:
				room = -math.MaxInt64
			}
		}
	}
	var sum int64
	for q, sh := range f.shapes {
		k := f.group[q]
		if k < 0 || units[k] == 0 {
			sum += sh.Weight * total
			continue
		}
		n := units[k] / int64(sh.Count)
		switch {
		case sh.CPUMilli > 0 && f.mode == fgdRobust && withCPU && cpu < sh.CPUMilli:
			n = 0
		case sh.CPUMilli > 0 && f.mode == fgdFill && withCPU:
			n = min(n, cpu/sh.CPUMilli)
		}
		if sh.MemoryMiB > 0 {
			n = min(n, mem/sh.MemoryMiB)
		}
		usable := used[k]
		if c := n * int64(sh.Count); c < units[k] {
			usable = usable * c / units[k]
		}
		if room >= 0 {
			usable = min(usable, room)
		}
		sum += sh.Weight * (total - usable)
	}
	return sum
}

// TestFragFillMatchesReference: on random nodes, bookings and workloads
// (shapes bound to models, of several GPUs, CPU and memory heavy), the
// fragmentation fgd-fill and fgd-robust rate is the reference's, from a
// node's own counts and from counts moved GPU by GPU from an earlier
// state; with the node's free CPU or memory negative too (bookings past
// what it has, as an adopted pod may leave), and in a third of the
// rounds a node of unknown CPU (record.Unlimited) under weights at the
// learner's scale, whose CPU times the weights passes int64.
func TestFragFillMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(54, 1))
	models := []string{"A100", "T4", "L4"}
	for round := range 300 {
		huge := round%3 == 0
		var shapes []Shape
		for range 1 + r.IntN(12) {
			sh := Shape{CPUMilli: int64(r.IntN(4)) * 4000, MemoryMiB: int64(r.IntN(3)) * 32768, Weight: int64(1 + r.IntN(50))}
			if huge {
				sh.Weight = int64(1 + r.IntN(1e6))
			}
			if r.IntN(6) > 0 {
				sh.Count = 1 + r.IntN(3)
				switch r.IntN(3) {
				case 0:
					sh.Demand.Exclusive = true
				case 1:
					sh.Demand.MemoryMiB = int64(1+r.IntN(8)) * 4096
				default:
					sh.Demand.Compute = int64(1 + r.IntN(100))
				}
				for _, m := range models {
					if r.IntN(4) == 0 {
						sh.Demand.Models = append(sh.Demand.Models, m)
					}
				}
			}
			shapes = append(shapes, sh)
		}
		states := randomCluster(r)
		for _, mode := range []fgdMode{fgdFill, fgdRobust} {
			f := newFGDShapes(shapes)
			f.mode = mode
			for _, s := range states {
				before := s.Clone()
				after := s.Clone()
				for i := range after.GPUs {
					g := &after.Node.GPUs[i]
					if r.IntN(2) == 0 {
						after.GPUs[i] = Usage{int64(r.IntN(int(g.MemoryMiB + 1))), int64(r.IntN(int(g.ComputeCapacity() + 1)))}
					}
				}
				cpu := int64(r.IntN(80_000)) - 8000
				if huge {
					cpu = 1<<40 - int64(r.IntN(1<<20))
				}
				mem := int64(r.IntN(400_000)) - 150_000
				var b0, moved fragBase
				f.fill(&b0, before)
				moved.copyFrom(&b0)
				for g := range after.GPUs {
					if after.GPUs[g] != before.GPUs[g] {
						f.move(&moved, &b0, &after.Node.GPUs[g], g, before.GPUs[g], after.GPUs[g])
					}
				}
				var filled fragBase
				f.fill(&filled, after)
				for name, b := range map[string]*fragBase{"filled": &filled, "moved": &moved} {
					frag, gpuFrag := f.fragFill(b, cpu, mem, true)
					alone, _ := f.fragFill(b, cpu, mem, false)
					want := fragFillReference(f, after, cpu, mem, true)
					if frag != want || alone != want {
						t.Fatalf("round %d, mode %d, node %s, %s: frag %d (alone %d), want %d", round, mode, s.Node.Name, name, frag, alone, want)
					}
					if want := fragFillReference(f, after, cpu, mem, false); gpuFrag != want {
						t.Fatalf("round %d, mode %d, node %s, %s: frag without CPU %d, want %d", round, mode, s.Node.Name, name, gpuFrag, want)
					}
				}
			}
		}
	}
}

// TestModelsKey: lists of the same models, in any order and with
// repeats, share a key; other lists do not, even where a naive join of
// the names would collide.
func TestModelsKey(t *testing.T) {
	same := [][]string{{"P100", "G2"}, {"G2", "P100"}, {"P100", "G2", "P100"}}
	for _, m := range same[1:] {
		if modelsKey(m) != modelsKey(same[0]) {
			t.Errorf("modelsKey(%q) = %q, want %q as for %q", m, modelsKey(m), modelsKey(same[0]), same[0])
		}
	}
	distinct := [][]string{nil, {""}, {"G2"}, {"G2", "P100"}, {"G2P100"}, {"G2\x00P100"}, {"1:G2"}, {"G2", "1:P100"}, {"3:G21", "P100"}}
	seen := map[string][]string{}
	for _, m := range distinct {
		k := modelsKey(m)
		if prev, ok := seen[k]; ok {
			t.Errorf("modelsKey(%q) = modelsKey(%q) = %q", m, prev, k)
		}
		seen[k] = m
	}
}

// TestMulDiv: a x b / c as exact integers, truncated toward zero and
// saturating, for the operands fgd-robust's CPU room takes.
func TestMulDiv(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	cases := [][3]int64{{0, 5, 3}, {7, 0, 3}, {-7, 5, 3}, {math.MaxInt64, math.MaxInt64, 1}, {math.MinInt64, math.MaxInt64, 1},
		{math.MinInt64, 1, 1}, {1 << 40, 1 << 40, 1 << 20}, {-(1 << 40), 1 << 40, 3}, {math.MaxInt64, 2, math.MaxInt64}}
	for range 1000 {
		cases = append(cases, [3]int64{int64(r.Uint64()), r.Int64N(math.MaxInt64), 1 + r.Int64N(math.MaxInt64)},
			[3]int64{r.Int64N(1<<41) - 1<<40, r.Int64N(1 << 40), 1 + r.Int64N(1<<30)})
	}
	for _, c := range cases {
		want := new(big.Int).Quo(new(big.Int).Mul(big.NewInt(c[0]), big.NewInt(c[1])), big.NewInt(c[2]))
		switch {
		case want.Cmp(big.NewInt(math.MaxInt64)) > 0:
			want.SetInt64(math.MaxInt64)
		case want.Cmp(big.NewInt(-math.MaxInt64)) < 0:
			want.SetInt64(-math.MaxInt64)
		}
		if got := mulDiv(c[0], c[1], c[2]); got != want.Int64() {
			t.Errorf("mulDiv(%d, %d, %d) = %d, want %d", c[0], c[1], c[2], got, want.Int64())
		}
	}
}
