package v1alpha1_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// Annotation values are written by whoever may edit a pod or a node: the
// parsers never panic, and what they accept passes validation and comes
// back the same through Marshal.
func FuzzParse(f *testing.F) {
	f.Add(`{"apiVersion":"gpushare.io/v1alpha1","kind":"Allocation","node":"n","containers":[{"name":"c","kind":"App","gpus":[{"index":0,"uuid":"GPU-0","memoryMiB":1024,"compute":10}]}]}`)
	f.Add(`{"apiVersion":"gpushare.io/v1alpha1","kind":"GPUInventory","mode":"Shared","gpus":[{"index":0,"uuid":"GPU-0","model":"T4","memoryMiB":15360,"healthy":true,"numaNode":-1,"nvlinkPeers":[1]}]}`)
	f.Add(`{"apiVersion":"gpushare.io/v1alpha1","kind":"GPUUsage","time":"2026-01-01T00:00:00Z","gpus":[{"index":0,"usedMemoryMiB":1,"utilizationPercent":5}]}`)
	f.Add(`{"containers":[{"gpus":[{"index":-1}]}]}`)
	f.Add(`null`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, value string) {
		if a, err := gpusharev1.ParseAllocation(value); err == nil {
			roundTrip(t, a, gpusharev1.ParseAllocation)
		}
		if inv, err := gpusharev1.ParseInventory(value); err == nil {
			if errs := gpusharev1.ValidateInventory(inv); len(errs) > 0 {
				t.Fatalf("accepted an invalid inventory: %v", errs)
			}
			roundTrip(t, inv, gpusharev1.ParseInventory)
		}
		if u, err := gpusharev1.ParseUsage(value); err == nil {
			roundTrip(t, u, gpusharev1.ParseUsage)
		}
	})
}

func roundTrip[T any](t *testing.T, v *T, parse func(string) (*T, error)) {
	t.Helper()
	s, err := gpusharev1.Marshal(v)
	if err != nil {
		t.Fatalf("Marshal of an accepted value: %v", err)
	}
	back, err := parse(s)
	if err != nil {
		t.Fatalf("the marshalled value %s is refused: %v", s, err)
	}
	// An empty list and none mean the same (omitempty writes neither).
	if diff := cmp.Diff(v, back, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("round trip changed the value (-parsed +again):\n%s", diff)
	}
}
