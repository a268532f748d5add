package alloc

import (
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestScoreCompareExtremes: scores at the ends of int64 (the plugin's
// "always first" and "always last" for pods without GPUs) compare right
// against any other; a subtraction would overflow.
func TestScoreCompareExtremes(t *testing.T) {
	for _, other := range []Score{{Primary: -5 << 24}, {Primary: 7}, {Primary: math.MinInt64 + 1}, {Primary: math.MaxInt64 - 1}} {
		if got := (Score{Primary: math.MaxInt64}).Compare(other); got != 1 {
			t.Errorf("MaxInt64 against %+v: %d, want 1", other, got)
		}
		if got := (Score{Primary: math.MinInt64}).Compare(other); got != -1 {
			t.Errorf("MinInt64 against %+v: %d, want -1", other, got)
		}
	}
	if got := (Score{Secondary: math.MinInt64}).Compare(Score{Secondary: 1}); got != -1 {
		t.Errorf("Secondary MinInt64 against 1: %d, want -1", got)
	}
}

// TestSupplyOf: healthy GPUs counted per model and memory, sorted.
func TestSupplyOf(t *testing.T) {
	a := makeNode("a").gpus(2, "T4", 15360).unhealthy(1).n
	b := makeNode("b").gpus(4, "A10", 23028).gpus(1, "T4", 15360).n
	c := makeNode("c").gpus(1, "T4", 16384).n
	got := SupplyOf([]*Node{&a, &b, &c})
	want := []Supply{{Model: "A10", MemoryMiB: 23028, GPUs: 4}, {Model: "T4", MemoryMiB: 15360, GPUs: 2}, {Model: "T4", MemoryMiB: 16384, GPUs: 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SupplyOf (-want +got):\n%s", diff)
	}
}

// supplyCluster is one node of a scarce model ("P100", 2 GPUs) whose
// first GPU has 60% free, and eight idle ones of a plentiful model ("G2",
// 8 GPUs each), under a workload of whole GPUs (weight 10) and 60% pods,
// of which a fifth ask for a P100 (weights 8 and 2).
func supplyCluster() ([]*NodeState, []Shape) {
	states := []*NodeState{makeNode("p100").gpus(2, "P100", 16384).state(Usage{Compute: 40})}
	for i := range 8 {
		states = append(states, makeNode(fmt.Sprintf("g2-%d", i)).gpus(8, "G2", 16384).state())
	}
	workload := []Shape{
		{CPUMilli: 1000, Count: 1, Demand: Demand{Exclusive: true}, Weight: 10},
		{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 60}, Weight: 8},
		{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 60, Models: []string{"P100"}}, Weight: 2},
	}
	return states, workload
}

// TestSupplyKeepsFreePodsOffScarceGPUs: a 60% pod that any GPU takes
// fills the scarce P100's 60% hole when fgd-robust weighs no supply (an
// idle G2 GPU would lose its whole-GPU room), and goes to a G2 when it
// does: a tenth of the GPU demand needs the P100s, 3% of the GPUs. A pod
// bound to the P100 still goes there.
func TestSupplyKeepsFreePodsOffScarceGPUs(t *testing.T) {
	states, workload := supplyCluster()
	free := makePod("free").cpu(1000).shared("main", 0, 60).obj()
	blind, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Workload: workload}})
	if err != nil {
		t.Fatal(err)
	}
	if d := blind.Pick(states, free, 1); d.Placement == nil || d.Placement.Node != "p100" {
		t.Fatalf("without supply: %+v, want the pod on p100 (the premise of the test)", d.Placement)
	}
	nodes := make([]*Node, len(states))
	for i, s := range states {
		nodes[i] = s.Node
	}
	aware, err := blind.Resupply(SupplyOf(nodes))
	if err != nil {
		t.Fatal(err)
	}
	if d := aware.Pick(states, free, 1); d.Placement == nil || d.Placement.Node == "p100" {
		t.Errorf("with supply: %+v, want the pod on a G2 node", d.Placement)
	}
	bound := makePod("bound").cpu(1000).container(App, ContainerRequest{Name: "main", Compute: 60, Models: []string{"P100"}}).obj()
	if d := aware.Pick(states, bound, 1); d.Placement == nil || d.Placement.Node != "p100" {
		t.Errorf("a P100 pod with supply: %+v, want p100", d.Placement)
	}
}

// TestPressures: a demand's pressure is its share of the GPU demand over
// its share of the GPUs; demands every GPU admits, or none, have none.
func TestPressures(t *testing.T) {
	_, workload := supplyCluster()
	workload = append(workload, Shape{Count: 1, Demand: Demand{Exclusive: true, Models: []string{"H100"}}, Weight: 1})
	f := newFGDShapes(workload)
	supply := []Supply{{Model: "G2", MemoryMiB: 16384, GPUs: 16}, {Model: "P100", MemoryMiB: 16384, GPUs: 2}}
	got := map[string]int64{}
	for k, p := range f.pressures(supply) {
		got[fmt.Sprint(f.demands[k].Models)] = p
	}
	// GPU demand (weight x share): whole 10, any 60% 4.8, P100 1.2,
	// H100 1, of 17; P100 has 2 of 18 GPUs: 1000 x 1.2/17 / (2/18) =
	// 635. No GPU admits the H100 pods; the others take any GPU.
	want := map[string]int64{"[P100]": 635, "[]": 0, "[H100]": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pressures (-want +got):\n%s", diff)
	}
	if p := f.pressures(nil); p != nil {
		t.Errorf("pressures without supply: %v, want none", p)
	}
}

// TestResupply: a Placer given a new supply keeps its workload and the
// nodes' derived data, and decides as a Placer built with that supply.
func TestResupply(t *testing.T) {
	states, workload := supplyCluster()
	old, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Workload: workload}})
	if err != nil {
		t.Fatal(err)
	}
	supply := []Supply{{Model: "G2", MemoryMiB: 16384, GPUs: 16}, {Model: "P100", MemoryMiB: 16384, GPUs: 2}}
	next, err := old.Resupply(supply)
	if err != nil {
		t.Fatal(err)
	}
	if next.node.(*fgd).memo != old.node.(*fgd).memo {
		t.Error("re-supplied, the memo is not shared")
	}
	if !cmp.Equal(next.Supply(), supply) || old.Supply() != nil {
		t.Errorf("Supply: %v (old %v), want %v (old none)", next.Supply(), old.Supply(), supply)
	}
	fresh, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Workload: workload, Supply: supply}})
	if err != nil {
		t.Fatal(err)
	}
	pod := makePod("free").cpu(1000).shared("main", 0, 60).obj()
	old.Pick(states, pod, 1) // memoises old's data on the states
	got, want := next.Pick(states, pod, 1), fresh.Pick(clones(states), pod, 1)
	if got.Placement == nil || want.Placement == nil || got.Placement.Node != want.Placement.Node || got.Placement.Score != want.Placement.Score {
		t.Errorf("re-supplied Placer: %+v, fresh one: %+v", got.Placement, want.Placement)
	}
}

// clones copies states without their memoised data.
func clones(states []*NodeState) []*NodeState {
	out := make([]*NodeState, len(states))
	for i, s := range states {
		out[i] = s.Clone()
	}
	return out
}
