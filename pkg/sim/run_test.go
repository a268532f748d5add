package sim

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/trace"
	"github.com/gpushare/gpushare/pkg/workload"
)

func TestOrderReachesArrivalLimit(t *testing.T) {
	nodes, pods := trace.Synthetic(1, 20)
	w := &Workload{Name: "t", Nodes: nodes, Pods: pods}
	idx := Order(w, 42)
	var total int64
	for _, i := range idx {
		total += w.Pods[i].RequestedMilli()
	}
	if limit := int64(arrivalEnd * float64(w.Capacity())); total < limit {
		t.Errorf("arrivals ask %d milli-GPU, want at least %d", total, limit)
	}
	if diff := cmp.Diff(idx, Order(w, 42)); diff != "" {
		t.Errorf("order is not repeatable for one seed:\n%s", diff)
	}
	if cmp.Equal(idx, Order(w, 43)) {
		t.Error("seeds 42 and 43 gave the same order")
	}
}

func TestRunIsRepeatableAndBounded(t *testing.T) {
	nodes, pods := trace.Synthetic(7, 30)
	w := &Workload{Name: "t", Nodes: nodes, Pods: pods}
	for _, policy := range []string{"random", "bestfit", "fgd-pack", "binpack/spread"} {
		a, err := Run(context.Background(), w, policy, []uint64{1, 2}, Options{})
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		b, err := Run(context.Background(), w, policy, []uint64{1, 2}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(a.PerSeed, b.PerSeed); diff != "" {
			t.Errorf("%s: results differ between identical runs:\n%s", policy, diff)
		}
		for _, v := range []float64{a.Unalloc100, a.Unalloc130, a.Frag90} {
			if v < 0 || v > 100 {
				t.Errorf("%s: percentage %v out of [0,100]", policy, v)
			}
		}
		// Allocated never exceeds arrived.
		for _, p := range a.Curve {
			if p.Allocated > p.Arrived+1e-9 {
				t.Errorf("%s: allocated %.2f%% > arrived %.2f%%", policy, p.Allocated, p.Arrived)
			}
		}
	}
	if _, err := Run(context.Background(), w, "nope", []uint64{1}, Options{}); err == nil {
		t.Error("unknown policy: want an error")
	}
}

// TestRunOnline: with the online learner a fragmentation-aware policy
// replays repeatably, and close to the oracle on the synthetic trace;
// an unknown workload source is an error.
func TestRunOnline(t *testing.T) {
	nodes, pods := trace.Synthetic(7, 40)
	w := &Workload{Name: "t", Nodes: nodes, Pods: pods}
	seeds := []uint64{1, 2, 3}
	oracle, err := Run(context.Background(), w, "fgd-fill", seeds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Run(context.Background(), w, "fgd-fill", seeds, Options{Workload: Online})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), w, "fgd-fill", seeds, Options{Workload: Online})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a.PerSeed, b.PerSeed); diff != "" {
		t.Errorf("online results differ between identical runs:\n%s", diff)
	}
	if d := a.Unalloc100 - oracle.Unalloc100; d > 3 || d < -3 {
		t.Errorf("online %.2f%% vs oracle %.2f%%: more than 3 points apart", a.Unalloc100, oracle.Unalloc100)
	}
	if _, err := Run(context.Background(), w, "fgd-fill", seeds, Options{Workload: "psychic"}); err == nil {
		t.Error("unknown workload source: want an error")
	}
}

// TestRunDefrag: moving pods to make room places at least as much as not
// moving them on the same order, repeatably, within the moves' budget,
// and over-commits nothing (makeRoom fails the run if it would).
func TestRunDefrag(t *testing.T) {
	nodes, pods := trace.Synthetic(7, 30)
	w := &Workload{Name: "t", Nodes: nodes, Pods: pods}
	seeds := []uint64{1, 2, 3}
	plain, err := Run(context.Background(), w, "binpack", seeds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := &Defrag{Movable: 1, Budget: alloc.DefragBudget{MaxMoves: 3}}
	a, err := Run(context.Background(), w, "binpack", seeds, Options{Defrag: d})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), w, "binpack", seeds, Options{Defrag: d})
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(a.PerSeed, b.PerSeed) || a.Plans100 != b.Plans100 || a.MovedPerPlaced100 != b.MovedPerPlaced100 {
		t.Errorf("two runs differ: %v %d %v, then %v %d %v", a.PerSeed, a.Plans100, a.MovedPerPlaced100, b.PerSeed, b.Plans100, b.MovedPerPlaced100)
	}
	if a.Plans100 == 0 || a.MovedPerPlaced100 <= 0 {
		t.Fatalf("no pod moved (%d plans): the synthetic trace should leave room to make", a.Plans100)
	}
	if a.Unalloc100 > plain.Unalloc100 {
		t.Errorf("unallocated at 100%%: %.2f%% with moves, %.2f%% without", a.Unalloc100, plain.Unalloc100)
	}
}

// TestRunClaims: as claims, each pod takes the first GPUs that fit on
// the node the policy picks, whatever the GPU-level policy says, so
// binpack's and spread's GPU choices replay alike; as extended-resource
// pods they differ. Claims are not moved.
func TestRunClaims(t *testing.T) {
	nodes, pods := trace.Synthetic(7, 30)
	w := &Workload{Name: "t", Nodes: nodes, Pods: pods}
	seeds := []uint64{1, 2}
	run := func(policy string, o Options) *Result {
		t.Helper()
		r, err := Run(context.Background(), w, policy, seeds, o)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pack, spread := run("binpack/binpack", Options{}), run("binpack/spread", Options{})
	if cmp.Equal(pack.PerSeed, spread.PerSeed) {
		t.Fatalf("binpack's and spread's GPU choices replay alike (%v): the trace does not tell them apart", pack.PerSeed)
	}
	packClaims, spreadClaims := run("binpack/binpack", Options{Claims: true}), run("binpack/spread", Options{Claims: true})
	if !cmp.Equal(packClaims.PerSeed, spreadClaims.PerSeed) || !cmp.Equal(packClaims.Curve, spreadClaims.Curve) {
		t.Errorf("as claims, the GPU-level policy still counts: %v against %v", packClaims.PerSeed, spreadClaims.PerSeed)
	}
	if !packClaims.Claims || pack.Claims {
		t.Errorf("Result.Claims %v and %v; want true for claims only", packClaims.Claims, pack.Claims)
	}
	if _, err := Run(context.Background(), w, "binpack", seeds, Options{Claims: true, Defrag: &Defrag{Movable: 1}}); err == nil {
		t.Error("claims replayed with defragmentation; want an error")
	}
}

// TestRunSpare: on a cluster where whole-GPU pods and 0.8 shares compete
// for idle GPUs, keeping idle GPUs spare for the whole-GPU pods leaves
// less unallocated at 100% arrived than placing every share that fits,
// repeatably.
func TestRunSpare(t *testing.T) {
	var nodes []trace.Node
	for i := range 100 {
		nodes = append(nodes, trace.Node{Name: fmt.Sprintf("n%d", i), CPUMilli: 64000, MemoryMiB: 256 << 10, GPUs: 2, Model: "V100M16"})
	}
	var pods []trace.Pod
	for i := range 600 {
		p := trace.Pod{Name: fmt.Sprintf("p%d", i), CPUMilli: 4000, MemoryMiB: 8192, GPUs: 1, GPUMilli: 1000}
		if i%2 == 1 {
			p.GPUMilli = 800
		}
		pods = append(pods, p)
	}
	w := &Workload{Name: "t", Nodes: nodes, Pods: pods}
	seeds := []uint64{1, 2, 3}
	plain, err := Run(context.Background(), w, "fgd-robust", seeds, Options{Workload: Online})
	if err != nil {
		t.Fatal(err)
	}
	spare, err := Run(context.Background(), w, "fgd-robust", seeds, Options{Workload: Online, Learn: workload.Config{Spare: true}})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Run(context.Background(), w, "fgd-robust", seeds, Options{Workload: Online, Learn: workload.Config{Spare: true}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spare.PerSeed, again.PerSeed); diff != "" {
		t.Errorf("results differ between identical runs:\n%s", diff)
	}
	for i := range seeds {
		if spare.PerSeed[i] >= plain.PerSeed[i] {
			t.Errorf("seed %d: %.2f%% unallocated keeping idle GPUs spare, %.2f%% without; want less", seeds[i], spare.PerSeed[i], plain.PerSeed[i])
		}
	}
	t.Logf("unallocated at 100%%: %.2f%% without keeping idle GPUs spare, %.2f%% with", plain.Unalloc100, spare.Unalloc100)
}
