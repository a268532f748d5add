package alloc

import "testing"

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
