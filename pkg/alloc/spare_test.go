package alloc

import (
	"math"
	"strings"
	"testing"
)

func TestSpareOf(t *testing.T) {
	mix := []Shape{
		// 3 pods of a 0.5 share by compute, 2 CPUs each: 1.5 GPUs.
		{CPUMilli: 2000, Count: 1, Demand: Demand{Compute: 50}, Weight: 3},
		// 1 pod of two whole GPUs, 16 CPUs: 2 GPUs.
		{CPUMilli: 16000, Count: 2, Demand: Demand{Exclusive: true}, Weight: 1},
		// 2 pods of 4 GiB of a 16 GiB GPU, no CPU: 0.5 GPUs.
		{Count: 1, Demand: Demand{MemoryMiB: 4096}, Weight: 2},
		// Pods without GPUs and shapes of no weight do not count.
		{CPUMilli: 64000, Weight: 50},
		{CPUMilli: 1000, Count: 1, Demand: Demand{Exclusive: true}},
	}
	got := SpareOf(mix, 16384)
	// Demand: 1.5 + 2 + 0.5 = 4 GPUs, of which 2 whole; CPU 6 + 16 = 22
	// CPUs: 8 per GPU of whole-GPU demand, 5.5 per GPU of all demand.
	want := Spare{Whole: 0.5, WholeCPU: 8000, CPU: 5500}
	if !near(got.Whole, want.Whole) || !near(got.WholeCPU, want.WholeCPU) || !near(got.CPU, want.CPU) {
		t.Errorf("SpareOf = %+v, want %+v", got, want)
	}
	if got := SpareOf(mix[:1], 16384); got.Whole != 0 || got.WholeCPU != 0 {
		t.Errorf("SpareOf of shares alone = %+v, want no whole-GPU demand", got)
	}
	if got := SpareOf(nil, 0); got != (Spare{}) {
		t.Errorf("SpareOf(nil) = %+v, want zero", got)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSpareRoomAndKeeps(t *testing.T) {
	sp := Spare{Whole: 0.5, WholeCPU: 8000, CPU: 4000}
	var room Room
	// 4 GPUs, 2 idle, 1 half used, 1 full; 24 CPUs free: the idle ones
	// feed 3 whole GPUs of CPU, so both count; the free share 2.5 GPUs
	// is under the 6 GPUs' worth of demand the CPU feeds.
	a := makeNode("a").gpus(4, "A100", 16384).cpu(32000).state(Usage{}, Usage{}, Usage{MemoryMiB: 8192, Compute: 50}, Usage{MemoryMiB: 16384, Compute: 100})
	a.CPUMilli = 8000
	sp.Add(&room, a)
	if room != (Room{Idle: 2, Free: 2.5}) {
		t.Fatalf("room of a = %+v, want 2 idle and 2.5 free", room)
	}
	// 8 idle GPUs and 12 CPUs free: whole-GPU pods could take 1 of them
	// (8 CPUs each), and pods 3 GPUs' worth (4 CPUs per GPU).
	b := makeNode("b").gpus(8, "A100", 16384).cpu(16000).state()
	b.CPUMilli = 4000
	sp.Add(&room, b)
	if room != (Room{Idle: 3, Free: 5.5}) {
		t.Fatalf("room of a and b = %+v, want 3 idle and 5.5 free", room)
	}
	// Half the 5.5 GPUs still to be taken are whole-GPU demand: 2.75,
	// fewer than the 3 idle; with one GPU's demand waiting, 2.25.
	for _, c := range []struct {
		sp      Spare
		waiting float64
		want    bool
	}{
		{sp, 0, false},
		{Spare{Whole: 0.6}, 0, true},  // 3.3 GPUs of whole-GPU demand
		{Spare{Whole: 0.6}, 1, false}, // 2.7 once 1 GPU waits
		{Spare{Whole: 1}, 0, true},
		{Spare{}, 0, false}, // no whole-GPU demand: nothing kept
	} {
		if got := c.sp.Keeps(room, c.waiting); got != c.want {
			t.Errorf("%+v.Keeps(%+v, %v) = %v, want %v", c.sp, room, c.waiting, got, c.want)
		}
	}
	// Leaving pods give room back: at a turnover of 0.5 only half the
	// shortfall's demand is expected before they do, and at 1 none.
	for _, c := range []struct {
		turnover float64
		want     bool
	}{{0, true}, {0.4, true}, {0.5, false}, {1, false}, {2, false}, {-1, true}} {
		r := room
		r.Turnover = c.turnover
		if got := (&Spare{Whole: 1}).Keeps(r, 0); got != c.want {
			t.Errorf("Keeps(%+v) with only whole-GPU demand = %v, want %v", r, got, c.want)
		}
	}
	// An empty cluster is never short, even if all demand asks whole
	// GPUs: its idle GPUs are all of its free share.
	if empty := (Room{Idle: 8, Free: 8}); (&Spare{Whole: 1}).Keeps(empty, 0) {
		t.Errorf("Keeps(%+v) with only whole-GPU demand = true, want false", empty)
	}
}

func TestSparingPlacesShares(t *testing.T) {
	sp := &Spare{Whole: 0.5, WholeCPU: 4000}
	// GPU 0 idle, GPU 1 has 8 GiB free.
	partly := func() *NodeState {
		return makeNode("n").gpus(2, "A100", 16384).state(Usage{}, Usage{MemoryMiB: 8192, Compute: 50})
	}
	small := makePod("small").cpu(1000).shared("c", 4096, 25).obj()
	large := makePod("large").cpu(1000).shared("c", 12288, 75).obj()
	whole := makePod("whole").cpu(1000).whole("c", 1).obj()
	for _, policy := range []string{"spread", "binpack", "fgd-robust"} {
		pl := mustPlacer(policy)
		kept := pl.Sparing(sp)
		if pl.Spare() != nil || kept.Spare() != sp || kept.Sparing(nil).Spare() != nil {
			t.Fatalf("%s: Sparing and Spare do not round-trip", policy)
		}
		// Without sparing, spread gives the small share the idle GPU.
		p, unfit := kept.Place(partly(), small)
		if unfit != nil || gpusOf(p)[0][0] != 1 {
			t.Errorf("%s sparing: small share placed on %v (%v), want the partly used GPU 1", policy, p, unfit)
		}
		// A share no partly used GPU fits waits, and says why.
		if p, unfit := kept.Place(partly(), large); p != nil {
			t.Errorf("%s sparing: large share placed on GPUs %v, want it kept off the idle GPU", policy, gpusOf(p))
		} else if unfit == nil || len(unfit.Reasons) != 1 || unfit.Reasons[0].Reason != ReasonGPUSpare {
			t.Errorf("%s sparing: large share's reason %v, want %s", policy, unfit, ReasonGPUSpare)
		} else if !unfit.Resolvable() {
			t.Errorf("%s sparing: a share kept off idle GPUs is not resolvable; moving pods off GPU 1 makes room", policy)
		} else if got, want := Diagnose(1, []*Unfit{unfit}).String(), "0/1 nodes are available: 1 GPUKeptSpare; idle GPUs on 1 node(s) are kept "+
			"for the whole-GPU pods expected (workload.keepIdleGPUs): the pod waits for a partly used GPU with room, "+
			"or until fewer whole-GPU pods are expected than idle GPUs are left."; got != want {
			t.Errorf("%s sparing: the pod's event says\n %q\nwant\n %q", policy, got, want)
		}
		if p, unfit := pl.Place(partly(), large); unfit != nil || gpusOf(p)[0][0] != 0 {
			t.Errorf("%s: without sparing the large share got %v (%v), want the idle GPU 0", policy, p, unfit)
		}
		// Whole-GPU pods take idle GPUs as before.
		if p, unfit := kept.Place(partly(), whole); unfit != nil || gpusOf(p)[0][0] != 0 {
			t.Errorf("%s sparing: whole GPU got %v (%v), want GPU 0", policy, p, unfit)
		}
		// Pick finds the node where a partly used GPU fits.
		states := []*NodeState{makeNode("idle").gpus(2, "A100", 16384).state(), makeNode("used").gpus(2, "A100", 16384).state(Usage{MemoryMiB: 4096, Compute: 25}, Usage{MemoryMiB: 16384, Compute: 100})}
		if d := kept.Pick(states, large, 1); d.Index != 1 {
			t.Errorf("%s sparing: Pick chose node %d, want the partly used node 1", policy, d.Index)
		}
	}
}

func TestSparingWhereCPUFeedsNoWholeGPU(t *testing.T) {
	sp := &Spare{Whole: 0.5, WholeCPU: 8000}
	large := makePod("large").cpu(2000).shared("c", 12288, 75).obj()
	small := makePod("small").cpu(2000).shared("c", 4096, 25).obj()
	quarter := Usage{MemoryMiB: 4096, Compute: 25}
	pl := mustPlacer("binpack").Sparing(sp)
	for _, c := range []struct {
		name  string
		state *NodeState
		pod   *PodRequest
		want  int // the GPU the pod gets, -1 for kept spare
	}{
		// 10 CPUs feed one whole-GPU pod; the pod's 2 leave 8, which one
		// idle GPU feeds as well as two.
		{"CPU for one whole-GPU pod", makeNode("n").gpus(2, "A100", 16384).cpu(10000).state(), large, 0},
		// 20 CPUs: 18 left feed two whole-GPU pods, one idle GPU one.
		{"CPU for two whole-GPU pods", makeNode("n").gpus(2, "A100", 16384).cpu(20000).state(), large, -1},
		// 16 CPUs feed two whole-GPU pods, the 14 the pod leaves one:
		// its CPU alone takes one, wherever on the node it goes.
		{"the pod's CPU takes one", makeNode("n").gpus(3, "A100", 16384).cpu(16000).state(quarter), small, -1},
		// 24 CPUs: 22 left still feed two; only the idle GPUs are kept,
		// and the partly used one takes the share.
		{"a partly used GPU", makeNode("n").gpus(3, "A100", 16384).cpu(24000).state(quarter), small, 0},
		// A node with nothing idle is not concerned.
		{"nothing idle", makeNode("n").gpus(1, "A100", 16384).cpu(16000).state(Usage{MemoryMiB: 1024, Compute: 5}), large, 0},
	} {
		p, unfit := pl.Place(c.state, c.pod)
		switch {
		case c.want < 0 && (unfit == nil || unfit.Reasons[0].Reason != ReasonGPUSpare):
			t.Errorf("%s: placed on %v (%v), want kept spare", c.name, p, unfit)
		case c.want >= 0 && (unfit != nil || gpusOf(p)[0][0] != c.want):
			t.Errorf("%s: placed on %v (%v), want GPU %d", c.name, p, unfit, c.want)
		}
	}
}

func TestSparingCountsWhatTheContainerBreaks(t *testing.T) {
	sp := &Spare{Whole: 0.5, WholeCPU: 8000}
	pl := mustPlacer("binpack").Sparing(sp)
	// Two GPUs of a share break two idle GPUs: 3 idle and 16 CPUs feed
	// two whole-GPU pods, 1 idle only one.
	two := makePod("two").container(App, ContainerRequest{Name: "c", Count: 2, MemoryMiB: 8192, Compute: 50}).obj()
	if _, unfit := pl.Place(makeNode("n").gpus(3, "A100", 16384).cpu(16000).state(), two); unfit == nil || unfit.Reasons[0].Reason != ReasonGPUSpare {
		t.Errorf("two GPUs of a share: unfit %v, want kept spare", unfit)
	}
	// A share of all a GPU's compute only an idle GPU takes: it is a
	// whole GPU, and takes one.
	full := makePod("full").shared("c", 0, 100).obj()
	if p, unfit := pl.Place(makeNode("n").gpus(2, "A100", 16384).state(), full); unfit != nil || gpusOf(p)[0][0] != 0 {
		t.Errorf("share of all the compute: %v (%v), want GPU 0", p, unfit)
	}
	// An init container's share beside the app container's whole GPU
	// books nothing more than that GPU: the pod is one whole-GPU pod.
	initWhole := makePod("init").container(Init, ContainerRequest{Name: "i", MemoryMiB: 4096, Compute: 25}).whole("c", 1).obj()
	p, unfit := pl.Place(makeNode("n").gpus(1, "A100", 16384).state(), initWhole)
	if unfit != nil || len(p.Booked) != 1 || p.Booked[0].Usage != (Usage{MemoryMiB: 16384, Compute: 100}) {
		t.Errorf("init share beside a whole GPU: %+v (%v), want GPU 0 booked whole", p, unfit)
	}
	// Where the node lacks room with its idle GPUs counted, the reason
	// is that, not the GPUs kept spare: 2 GPUs of 25% asked, GPU 0 idle,
	// GPUs 1 and 2 full.
	full2 := Usage{MemoryMiB: 16384, Compute: 100}
	short := makePod("short").container(App, ContainerRequest{Name: "c", Count: 2, MemoryMiB: 4096, Compute: 25}).obj()
	s := makeNode("n").gpus(3, "A100", 16384).state(Usage{}, full2, full2)
	_, plain := mustPlacer("binpack").Place(s, short)
	_, kept := pl.Place(s, short)
	if plain == nil || kept == nil || kept.Reasons[0].String() != plain.Reasons[0].String() {
		t.Errorf("short of GPUs: reason %v with sparing, want %v as without", kept, plain)
	}
}

// TestDiagnoseKept: beside nodes whose idle GPUs are kept, the largest
// free share an event names is that of the GPUs not kept.
func TestDiagnoseKept(t *testing.T) {
	d := Diagnosis{Nodes: 2, ByReason: map[Reason]int{ReasonGPUSpare: 1, ReasonGPUMemory: 1}, LargestFreeMiB: 3000, NeedMiB: 3500}
	if got := d.Detail(); !strings.HasSuffix(got, "; largest free share on any GPU not kept is 3000 MiB, pod needs 3500 MiB") ||
		!strings.HasPrefix(got, "idle GPUs on 1 node(s) are kept") {
		t.Errorf("Detail = %q; want the kept nodes first, then the largest share of the GPUs not kept", got)
	}
}
