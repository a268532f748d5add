package v1alpha1

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Asked keeps the request-shaping annotations a pod had, tells which
// changed (added, removed or rewritten; others ignored), and puts them
// back without touching the annotations it was given.
func TestAsked(t *testing.T) {
	keys := []string{"models", "compute", "limits"}
	bound := map[string]string{"models": "Tesla T4", "compute": "50", "other": "x"}
	a := AskedOf(bound, keys)
	if want := map[string]string{"models": "Tesla T4", "compute": "50"}; !cmp.Equal(a.Annotations, want) {
		t.Fatalf("AskedOf = %v, want %v", a.Annotations, want)
	}
	if e := a.Edited(bound, keys); len(e) != 0 {
		t.Errorf("Edited of the pod as bound = %v, want none", e)
	}
	now := map[string]string{"models": "A100", "limits": "4Gi", "other": "y"}
	if e := a.Edited(now, keys); !slices.Equal(e, []string{"models", "compute", "limits"}) {
		t.Errorf("Edited = %v, want models (changed), compute (removed), limits (added)", e)
	}
	back := a.Apply(now, keys)
	if want := map[string]string{"models": "Tesla T4", "compute": "50", "other": "y"}; !cmp.Equal(back, want) {
		t.Errorf("Apply = %v, want %v", back, want)
	}
	if now["models"] != "A100" {
		t.Error("Apply changed the annotations it was given")
	}
	if e := AskedOf(nil, keys).Edited(nil, keys); len(e) != 0 {
		t.Errorf("a pod without annotations, unchanged: Edited = %v", e)
	}
}
