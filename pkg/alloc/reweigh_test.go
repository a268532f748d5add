package alloc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestReweigh: a re-weighed fragmentation-aware Placer decides exactly as
// a new one built for the new weights, on node states whose memos hold
// the old Placer's data; it shares that data while the GPU demands are
// the same (in any order of shapes) and not once they differ.
func TestReweigh(t *testing.T) {
	half := Shape{CPUMilli: 4000, Count: 1, Demand: Demand{Compute: 50}}
	whole := Shape{CPUMilli: 8000, Count: 1, Demand: Demand{Exclusive: true}}
	tenth := Shape{Count: 1, Demand: Demand{Compute: 10, Models: []string{"T4"}}}
	weigh := func(w []int64, shapes ...Shape) []Shape {
		out := make([]Shape, len(shapes))
		for i := range shapes {
			out[i] = shapes[i]
			out[i].Weight = w[i]
		}
		return out
	}
	for _, mode := range []string{"fgd", "fgd-pack", "fgd-fill", "fgd-robust"} {
		old, err := NewPlacer(Config{Node: mode, Options: Options{Workload: weigh([]int64{5, 1}, half, whole)}})
		if err != nil {
			t.Fatal(err)
		}
		same := weigh([]int64{1, 9}, whole, half) // same demands, other order and weights
		next, err := old.Reweigh(same, nil)
		if err != nil {
			t.Fatal(err)
		}
		if next.node.(*fgd).memo != old.node.(*fgd).memo {
			t.Errorf("%s: re-weighed with the same demands, the memo is not shared", mode)
		}
		other, err := old.Reweigh(weigh([]int64{1, 1, 1}, half, whole, tenth), nil)
		if err != nil {
			t.Fatal(err)
		}
		if other.node.(*fgd).memo == old.node.(*fgd).memo {
			t.Errorf("%s: re-weighed with another demand, the memo is shared", mode)
		}

		// Decisions: the re-weighed Placer on states the old one
		// memoised, against a fresh Placer on clones without memos.
		fresh, err := NewPlacer(Config{Node: mode, Options: Options{Workload: same}})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 2))
		var states []*NodeState
		for i := range 12 {
			model := []string{"T4", "A10"}[i%2]
			n := makeNode(fmt.Sprintf("n%d", i)).gpus(1+i%4, model, 16000).cpu(int64(16000 + 8000*(i%3)))
			states = append(states, n.state())
		}
		for k := range 60 {
			pod := makePod(fmt.Sprintf("p%d", k)).cpu(int64(r.IntN(3))*2000).shared("main", 0, int64(10+10*r.IntN(5))).obj()
			_ = old.Pick(states, pod, 1) // the old Placer's data in the memos
			clones := make([]*NodeState, len(states))
			for i, s := range states {
				clones[i] = s.Clone()
			}
			got, want := next.Pick(states, pod, 1), fresh.Pick(clones, pod, 1)
			if (got.Placement == nil) != (want.Placement == nil) || got.Placement != nil && got.Index != want.Index {
				t.Fatalf("%s, pod %d: re-weighed Placer chose %d, a fresh one %d", mode, k, got.Index, want.Index)
			}
			if got.Placement != nil {
				if err := states[got.Index].Apply(got.Placement); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
