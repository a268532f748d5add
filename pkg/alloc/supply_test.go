package alloc

import (
	"fmt"
	"math"
	"slices"
	"strings"
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

// TestSupplyOf: healthy GPUs counted per model and memory, sorted, with
// each node's CPU shared among its healthy GPUs.
func TestSupplyOf(t *testing.T) {
	a := makeNode("a").gpus(2, "T4", 15360).unhealthy(1).cpu(8000).n
	b := makeNode("b").gpus(4, "A10", 23028).gpus(1, "T4", 15360).cpu(50_000).n
	c := makeNode("c").gpus(1, "T4", 16384).cpu(4000).n
	got := SupplyOf([]*Node{&a, &b, &c})
	want := []Supply{{Model: "A10", MemoryMiB: 23028, GPUs: 4, Free: 4000, CPUMilli: 40_000},
		{Model: "T4", MemoryMiB: 15360, GPUs: 2, Free: 2000, CPUMilli: 8000 + 10_000}, {Model: "T4", MemoryMiB: 16384, GPUs: 1, Free: 1000, CPUMilli: 4000}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SupplyOf (-want +got):\n%s", diff)
	}

	// SupplyLeft: the same GPUs, with what the bookings leave free (a
	// GPU's free share is the lower of its memory's and its compute's).
	states := []*NodeState{
		makeNode("a").gpus(2, "T4", 15360).unhealthy(1).cpu(8000).state(Usage{Compute: 30}, Usage{}),
		makeNode("b").gpus(4, "A10", 23028).gpus(1, "T4", 15360).cpu(50_000).state(Usage{Compute: 100}, Usage{MemoryMiB: 23028 / 2, Compute: 10}),
		makeNode("c").gpus(1, "T4", 16384).cpu(4000).state(),
	}
	want[0].Free, want[1].Free = 2500, 1700
	if diff := cmp.Diff(want, SupplyLeft(states)); diff != "" {
		t.Errorf("SupplyLeft (-want +got):\n%s", diff)
	}
}

// TestSupplyLeftRaisesPressure: the P100s are a ninth of the GPUs and the
// demand bound to them a fiftieth: counted by GPUs, they are not scarce,
// and a 60% pod that any GPU takes fills a P100's 60% hole. Once pods have
// taken all but that hole, what is left free of them is scarce for the
// P100 pods still to come, and the pod goes to an idle G2 instead.
func TestSupplyLeftRaisesPressure(t *testing.T) {
	var states []*NodeState
	for i := range 8 {
		used := []Usage{{Compute: 100}, {Compute: 100}}
		if i == 0 {
			used[0] = Usage{Compute: 40}
		}
		states = append(states, makeNode(fmt.Sprintf("p100-%d", i)).gpus(2, "P100", 16384).state(used...))
	}
	for i := range 16 {
		states = append(states, makeNode(fmt.Sprintf("g2-%d", i)).gpus(8, "G2", 16384).state())
	}
	nodes := make([]*Node, len(states))
	for i, s := range states {
		nodes[i] = s.Node
	}
	workload := []Shape{
		{CPUMilli: 1000, Count: 1, Demand: Demand{Exclusive: true}, Weight: 20},
		{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 60}, Weight: 16},
		{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 60, Models: []string{"P100"}}, Weight: 1},
	}
	free := makePod("free").cpu(1000).shared("main", 0, 60).obj()
	for _, tc := range []struct {
		name   string
		supply []Supply
		want   string
	}{
		{"counted by GPUs", SupplyOf(nodes), "p100-0"},
		{"what is left", SupplyLeft(states), "g2"},
	} {
		pl, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Workload: workload, Supply: tc.supply}})
		if err != nil {
			t.Fatal(err)
		}
		if d := pl.Pick(clones(states), free, 1); d.Placement == nil || !strings.HasPrefix(d.Placement.Node, tc.want) {
			t.Errorf("%s: %+v, want the pod on %s", tc.name, d.Placement, tc.want)
		}
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

// TestPressures: the demand bound to a set of models has a pressure, its
// share of the GPU demand over its share of the GPUs; demands every GPU
// admits, or none, have none. Shapes too rare to be weighed by the
// fragmentation score still count through the mix.
func TestPressures(t *testing.T) {
	_, workload := supplyCluster()
	workload = append(workload, Shape{Count: 1, Demand: Demand{Exclusive: true, Models: []string{"H100"}}, Weight: 1},
		Shape{Count: 2, Demand: Demand{Exclusive: true, Models: []string{"G2", "P100"}}, Weight: 1})
	supply := []Supply{{Model: "G2", MemoryMiB: 16384, GPUs: 16}, {Model: "P100", MemoryMiB: 16384, GPUs: 2}}
	got := map[string]int64{}
	for _, b := range pressures(workload, supply) {
		got[fmt.Sprint(b.models)] = b.pressure
	}
	// GPU demand (weight x GPUs x share): whole 10, any 60% 4.8, P100
	// 1.2, H100 1, G2 or P100 2, of 19; P100 has 2 of 18 GPUs: 1000 x
	// 1.2/19 / (2/18) = 568. No GPU admits the H100 pods; every GPU
	// admits the others.
	want := map[string]int64{"[P100]": 568}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pressures (-want +got):\n%s", diff)
	}
	// 1 GPU of the P100s' 2 free, 16 of the G2s': 1000 x 1.2/19 x 17/1.
	booked := slices.Clone(supply)
	booked[0].Free, booked[1].Free = 16000, 1000
	if b := pressures(workload, booked); len(b) != 1 || b[0].pressure != 1073 {
		t.Errorf("pressures with a P100 booked: %+v, want [P100] at 1073", b)
	}
	// None of the P100s free: weighed as one GPU free (1000 x 1.2/19 x
	// 16/1 = 1010); and a thousandfold demand is capped.
	booked[1].Free = 0
	if b := pressures(workload, booked); len(b) != 1 || b[0].pressure != 1010 {
		t.Errorf("pressures with the P100s full: %+v, want [P100] at 1010", b)
	}
	booked[0].Free = 1e12
	if b := pressures(workload, booked); len(b) != 1 || b[0].pressure != maxPressure {
		t.Errorf("pressures with the P100s full in a vast cluster: %+v, want [P100] at %d", b, int64(maxPressure))
	}
	if p := pressures(workload, nil); p != nil {
		t.Errorf("pressures without supply: %v, want none", p)
	}

	// Shapes left out of the ones weighed (a learner keeps the heaviest)
	// still count through the mix: the free pod leaves the scarce P100's
	// hole to the P100 pods (pressure 2204) only when the mix has them.
	states, _ := supplyCluster()
	heaviest := workload[:2]
	mix := append(slices.Clone(heaviest), Shape{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 60, Models: []string{"P100"}}, Weight: 8})
	free := makePod("free").cpu(1000).shared("main", 0, 60).obj()
	for _, tc := range []struct {
		mix  []Shape
		want bool // on a G2 node
	}{{nil, false}, {mix, true}} {
		pl, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Workload: heaviest, Mix: tc.mix, Supply: supply}})
		if err != nil {
			t.Fatal(err)
		}
		d := pl.Pick(clones(states), free, 1)
		if d.Placement == nil || (d.Placement.Node != "p100") != tc.want {
			t.Errorf("mix of %d shapes: %+v, want on a G2 node: %v", len(tc.mix), d.Placement, tc.want)
		}
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
	if next.node.(*fgd).memo != old.node.(*fgd).memo || next.node.(*fgd).weighs != old.node.(*fgd).weighs {
		t.Error("re-supplied, the memo or the fragmentation kept with it is not shared")
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

	// fgd-robust at one level, or at both as one value, beside another
	// policy: the re-supplied Placer rates every node and GPU as a fresh
	// one, and the old Placer still rates as before.
	pods := []*PodRequest{pod, makePod("p100").cpu(2000).container(App, ContainerRequest{Name: "main", Count: 1, Compute: 40, Models: []string{"P100"}}).obj(),
		makePod("two").cpu(500).container(App, ContainerRequest{Name: "main", Count: 2, Compute: 30}).obj(), makePod("cpu").cpu(3000).obj()}
	for _, levels := range [][2]string{{"fgd-robust", ""}, {"fgd-robust", "fgd-robust"}, {"fgd-robust", "binpack"}, {"binpack", "fgd-robust"}, {"fgd-pack", "fgd-robust"}} {
		c := Config{Node: levels[0], GPU: levels[1], Options: Options{Workload: workload}}
		old, err := NewPlacer(c)
		if err != nil {
			t.Fatal(err)
		}
		next, err := old.Resupply(supply)
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := old.node.(*fgd); ok && old.gpu == GPUScorer(f) && next.gpu != next.node.(GPUScorer) {
			t.Errorf("%v: one policy at both levels became two values", levels)
		}
		c.Supply = supply
		fresh, err := NewPlacer(c)
		if err != nil {
			t.Fatal(err)
		}
		unsupplied, err := NewPlacer(Config{Node: levels[0], GPU: levels[1], Options: Options{Workload: workload}})
		if err != nil {
			t.Fatal(err)
		}
		for _, pod := range pods {
			for _, s := range states {
				for _, tc := range []struct {
					name      string
					got, want *Placer
				}{{"re-supplied", next, fresh}, {"old", old, unsupplied}} {
					got, _ := tc.got.Place(s, pod)
					want, _ := tc.want.Place(s.Clone(), pod)
					if (got == nil) != (want == nil) || got != nil && (got.Score != want.Score || !equalAssignments(got.Booked, want.Booked)) {
						t.Errorf("%v, pod %s on %s: %s Placer %+v, want %+v", levels, pod.Key, s.Node.Name, tc.name, got, want)
					}
				}
			}
		}
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

// TestPressureOn: a node's pressure sums the bound demands one of its
// healthy GPUs admits, whether its GPUs are of one model, of several, or
// of a model the supply has not counted yet.
func TestPressureOn(t *testing.T) {
	f := &fgd{pressed: []bound{{models: []string{"P100"}, pressure: 500}, {models: []string{"P100", "V100"}, pressure: 200}, {models: []string{"T4"}, pressure: 70}}}
	f.byModel = modelPressures(f.pressed, []Supply{{Model: "P100", GPUs: 2}, {Model: "G2", GPUs: 16}})
	for _, tc := range []struct {
		node Node
		want int64
	}{
		{makeNode("p100").gpus(2, "P100", 16384).n, 700},
		{makeNode("g2").gpus(8, "G2", 16384).n, 0},
		{makeNode("v100").gpus(2, "V100", 16384).n, 200}, // not in the supply
		{makeNode("mixed").gpus(1, "V100", 16384).gpus(1, "T4", 15360).n, 270},
		{makeNode("sick").gpus(2, "P100", 16384).unhealthy(0).unhealthy(1).n, 0},
		{makeNode("half").gpus(1, "T4", 15360).gpus(1, "P100", 16384).unhealthy(0).n, 700},
	} {
		if got := f.pressureOn(&tc.node); got != tc.want {
			t.Errorf("%s: pressure %d, want %d", tc.node.Name, got, tc.want)
		}
	}
}

// TestPressed: a Placer weighs the free share only where some demand it
// weighs is bound to models that not every GPU is of.
func TestPressed(t *testing.T) {
	_, workload := supplyCluster()
	mixed := []Supply{{Model: "G2", MemoryMiB: 16384, GPUs: 16}, {Model: "P100", MemoryMiB: 16384, GPUs: 2}}
	for _, tc := range []struct {
		name    string
		cfg     Config
		pressed bool
	}{
		{"fgd-robust, P100 demand, two models", Config{Node: "fgd-robust", Options: Options{Workload: workload, Supply: mixed}}, true},
		{"fgd-robust, no supply", Config{Node: "fgd-robust", Options: Options{Workload: workload}}, false},
		{"fgd-robust, P100s alone", Config{Node: "fgd-robust", Options: Options{Workload: workload, Supply: mixed[1:]}}, false},
		{"fgd-robust, no bound demand", Config{Node: "fgd-robust", Options: Options{Workload: workload[:2], Supply: mixed}}, false},
		// A P100 demand so rare its pressure rounds to 0 still counts: it
		// rises as the P100s fill.
		{"fgd-robust, rare bound demand", Config{Node: "fgd-robust", Options: Options{Workload: []Shape{
			{Count: 1, Demand: Demand{Exclusive: true}, Weight: 1_000_000},
			{Count: 1, Demand: Demand{Compute: 10, Models: []string{"P100"}}, Weight: 1},
		}, Supply: mixed}}, true},
		{"binpack", Config{Node: "binpack", Options: Options{Supply: mixed}}, false},
	} {
		pl, err := NewPlacer(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := pl.Pressed(); got != tc.pressed {
			t.Errorf("%s: Pressed %v, want %v", tc.name, got, tc.pressed)
		}
	}
}

// TestScarcityOf: each model's GPUs against the most plentiful model's,
// scaled from 0 (the most plentiful) to 63 per-mille; nil for one model.
func TestScarcityOf(t *testing.T) {
	supply := []Supply{{Model: "G2", MemoryMiB: 16384, GPUs: 3000}, {Model: "G2", MemoryMiB: 32768, GPUs: 1000},
		{Model: "T4", GPUs: 2000}, {Model: "V100", GPUs: 100}}
	want := map[string]int64{"G2": 0, "T4": 32, "V100": 62}
	if diff := cmp.Diff(want, scarcityOf(supply)); diff != "" {
		t.Errorf("scarcityOf (-want +got):\n%s", diff)
	}
	if got := scarcityOf(supply[:2]); got != nil {
		t.Errorf("scarcityOf(one model) = %v, want nil", got)
	}
}

// TestScarceModelsSpentLast: a half-GPU pod that any GPU takes grows the
// fragmentation as much on a plentiful model's 8-GPU node as on a scarce
// model's 2-GPU node, and neither is under pressure (the demand bound to
// models is bound to the T4). With that bound demand learned, it goes to
// the plentiful model, which pods that may run anywhere cannot use up:
// the scarce one may be the model of bound pods not seen yet. Without
// demand bound to any model, the tie goes to the node of fewer GPUs, as
// before.
func TestScarceModelsSpentLast(t *testing.T) {
	var states []*NodeState
	for i := range 12 {
		states = append(states,
			makeNode(fmt.Sprintf("g2-%d", i)).gpus(8, "G2", 16384).cpu(400_000).state(),
			makeNode(fmt.Sprintf("v100-%d", i)).gpus(2, "V100", 16384).cpu(100_000).state())
	}
	states = append(states, makeNode("t4").gpus(2, "T4", 16384).cpu(100_000).state())
	nodes := make([]*Node, len(states))
	for i, s := range states {
		nodes[i] = s.Node
	}
	free := []Shape{
		{CPUMilli: 1000, Count: 1, Demand: Demand{Exclusive: true}, Weight: 10},
		{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 50}, Weight: 10},
	}
	bound := append(slices.Clone(free), Shape{CPUMilli: 1000, Count: 1, Demand: Demand{Compute: 50, Models: []string{"T4"}}, Weight: 1})
	pod := makePod("free").cpu(1000).shared("main", 0, 50).obj()
	for _, tc := range []struct {
		name     string
		workload []Shape
		want     string
	}{
		{"demand bound to a model", bound, "g2-"},
		{"no demand bound to a model", free, "v100-"},
	} {
		pl, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Workload: tc.workload, Supply: SupplyOf(nodes)}})
		if err != nil {
			t.Fatal(err)
		}
		if d := pl.Pick(clones(states), pod, 1); d.Placement == nil || !strings.HasPrefix(d.Placement.Node, tc.want) {
			t.Errorf("%s: %+v, want the pod on a %s node", tc.name, d.Placement, tc.want)
		}
	}
}
