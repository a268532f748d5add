package alloc

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// victimCase is a node of two 16 GiB GPUs, idle (the candidates
// removed), and a pod asking 10 GiB of one GPU; candidates a (4 GiB) and
// b (4 GiB) on GPU 0, c (12 GiB) on GPU 1. Returned together they leave
// 8 and 4 GiB free: the pod fits only with some evicted.
func victimCase(prio map[string]int64) (*Rater, *NodeState, []Candidate) {
	base := makeNode("n").gpus(2, "A10", 16384).state()
	pl := mustPlacer("binpack")
	r := pl.NewRater(makePod("high").shared("main", 10240, 0).obj(), 1)
	book := func(key string, gpu int, mib int64) Candidate {
		return Candidate{Key: key, Priority: prio[key], Placement: &Placement{Node: "n",
			Booked: []Assignment{{GPU: gpu, UUID: base.Node.GPUs[gpu].UUID, Usage: Usage{MemoryMiB: mib}}}}}
	}
	// Most important first: the caller's order.
	return r, base, []Candidate{book("a", 0, 4096), book("b", 0, 4096), book("c", 1, 12288)}
}

// TestPlanVictims: the cheapest set of evictions that frees room for the
// pod on one GPU, by disruption budgets, then the highest priority
// evicted, then the count, then the GPU memory.
func TestPlanVictims(t *testing.T) {
	for _, tc := range []struct {
		name       string
		prio       map[string]int64
		violations func([]string) int
		want       VictimPlan
	}{
		// Evicting a or b (GPU 0 keeps the other: 12 GiB free) or c
		// (16 GiB free): one pod each of equal priority; b frees less
		// memory than c, and a, more important, is returned first.
		{name: "least memory", want: VictimPlan{Victims: map[string]bool{"b": true}, GPUs: []int{0}}},
		{name: "lowest priority", prio: map[string]int64{"a": 10, "b": 10, "c": 5},
			want: VictimPlan{Victims: map[string]bool{"c": true}, GPUs: []int{1}}},
		{name: "disruption budget", violations: func(keys []string) int {
			n := 0
			for _, k := range keys {
				if k == "a" || k == "b" {
					n++
				}
			}
			return n
		}, want: VictimPlan{Victims: map[string]bool{"c": true}, GPUs: []int{1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, base, candidates := victimCase(tc.prio)
			got := PlanVictims(r, base, candidates, tc.violations)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			// The plan is sound: the others returned, the pod fits.
			work := base.Clone()
			for _, c := range candidates {
				if !got.Victims[c.Key] {
					if err := work.Apply(c.Placement); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, unfit := r.Rate(work); unfit != nil {
				t.Errorf("with the plan's victims gone the pod does not fit: %v", unfit)
			}
		})
	}
}

// TestPlanVictimsNone: no eviction when the pod cannot fit even with
// every candidate gone, or when no candidate holds a GPU.
func TestPlanVictimsNone(t *testing.T) {
	r, base, candidates := victimCase(nil)
	tooBig := mustPlacer("binpack").NewRater(makePod("huge").shared("main", 20480, 0).obj(), 1)
	if got := PlanVictims(tooBig, base, candidates, nil); len(got.Victims) != 0 {
		t.Errorf("a pod no GPU holds: victims %v, want none", got.Victims)
	}
	idle := []Candidate{{Key: "cpu-only", Placement: &Placement{Node: "n"}}}
	if got := PlanVictims(r, base, idle, nil); len(got.Victims) != 0 {
		t.Errorf("candidates without GPUs: victims %v, want none", got.Victims)
	}
}
