package cache

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// nodePods holds what a map from UID to entry would, through any
// sequence of sets and removals.
func TestNodePodsActsAsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s nodePods
	want := map[types.UID]*podEntry{}
	for step := range 5000 {
		uid := types.UID(fmt.Sprint(rng.IntN(12)))
		switch rng.IntN(3) {
		case 0, 1:
			p := &podEntry{key: fmt.Sprint(step)}
			s.set(uid, p)
			want[uid] = p
		default:
			s.remove(uid)
			delete(want, uid)
		}
		if len(s) != len(want) {
			t.Fatalf("step %d: %d entries, want %d", step, len(s), len(want))
		}
		for i := range 12 {
			uid := types.UID(fmt.Sprint(i))
			if got := s.get(uid); got != want[uid] {
				t.Fatalf("step %d: get(%s) = %v, want %v", step, uid, got, want[uid])
			}
		}
	}
}
