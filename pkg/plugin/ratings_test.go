package plugin

import (
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// TestRatings: ratings put from many goroutines, past the slots too, all
// come back by node, the latest of a node put twice; a clone taken while
// puts run holds only ratings that were put, and does not change with the
// original.
func TestRatings(t *testing.T) {
	r := newRatings(8)
	want := map[string]alloc.Rating{}
	for i := range 20 {
		want[fmt.Sprintf("n%d", i)] = alloc.Rating{Tie: uint64(i)}
	}
	var wg sync.WaitGroup
	var clone *ratings
	for i := range 20 {
		wg.Go(func() {
			name := fmt.Sprintf("n%d", i)
			r.put(name, alloc.Rating{Tie: 1000})
			r.put(name, want[name])
			if i == 10 {
				clone = r.clone()
			}
		})
	}
	wg.Wait()
	if got := r.byNode(); !maps.Equal(got, want) {
		t.Errorf("byNode: %v, want %v", got, want)
	}
	got := clone.byNode()
	for n, rating := range got {
		if rating != want[n] && rating != (alloc.Rating{Tie: 1000}) {
			t.Errorf("clone has %s: %v, which was never put", n, rating)
		}
	}
	clone.put("n0", alloc.Rating{Tie: 7})
	if r.byNode()["n0"] != want["n0"] {
		t.Errorf("a put to the clone changed the original")
	}
	if got["n10"] != want["n10"] {
		t.Errorf("clone taken after n10's puts has n10 %v, want %v", got["n10"], want["n10"])
	}
}

// TestRatingsReleased: a cycle's ratings start empty though its slots
// were another cycle's, released full; a released cycle reads as empty.
func TestRatingsReleased(t *testing.T) {
	for round := range 3 {
		r := newRatings(8)
		if got := r.byNode(); len(got) != 0 {
			t.Fatalf("round %d: new ratings hold %v", round, got)
		}
		want := map[string]alloc.Rating{}
		for i := range 8 - round {
			name := fmt.Sprintf("r%d-n%d", round, i)
			want[name] = alloc.Rating{Tie: uint64(i)}
			r.put(name, want[name])
		}
		if got := r.byNode(); !maps.Equal(got, want) {
			t.Fatalf("round %d: byNode %v, want %v", round, got, want)
		}
		r.release()
		if got := r.byNode(); len(got) != 0 {
			t.Fatalf("round %d: released ratings hold %v", round, got)
		}
	}
}
