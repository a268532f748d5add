package cache_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
)

// TestHoldTakesTheRoomMovedPodsLeave: a plan holds n1's free 8 GiB for
// the waiting pod w and 8 GiB of n2 for the replacement of x (controller
// rs). Nobody else fits either; x's booking joins w's hold as x ends, so
// n1 stays full until w takes it all; the replacement takes its hold on
// n2; and then the plan holds nothing.
func TestHoldTakesTheRoomMovedPodsLeave(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384))
	c.SetNode(gpuNode(t, "n2", 16384))
	c.SetPod(recordedPod(t, "x", appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 8192, 0)})))
	c.SetPod(recordedPod(t, "y", appRecord("n2", []gpusharev1.GPUShare{share("n2", 0, 6144, 0)})))

	if err := c.Hold("p", "p/target", cache.HoldFor{Pod: "w"}, placement("n1", 0, 8192, 0), []types.UID{"x"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Hold("p", "p/move-0", cache.HoldFor{Owner: "rs", Namespace: "default"}, placement("n2", 0, 8192, 0), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Hold("p", "p/target", cache.HoldFor{Pod: "w"}, &alloc.Placement{Node: "n1"}, nil); !errors.Is(err, cache.ErrHoldExists) {
		t.Errorf("holding a key twice: %v, want ErrHoldExists", err)
	}
	if err := c.Hold("p", "p/over", cache.HoldFor{Pod: "w"}, placement("n2", 0, 4096, 0), nil); !errors.Is(err, alloc.ErrOvercommit) {
		t.Errorf("holding more than is free: %v, want ErrOvercommit", err)
	}
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 16384}}; !cmp.Equal(got, want) {
		t.Errorf("n1 with x and the hold: %v, want %v", got, want)
	}
	placer := mustPlacer(t)
	for _, n := range []string{"n1", "n2"} {
		if _, err := c.PlaceAndAssume("z", placer, n, sharedRequest("default/z", "c0", 4096)); err == nil {
			t.Errorf("pod z placed on %s, in held room", n)
		}
	}
	if got := c.HeldFor("other", "other-rs", "default"); got != nil {
		t.Errorf("holds for another pod: %v", got)
	}
	if got := c.HeldFor("w", "", "default"); len(got) != 1 || got[0].Key != "p/target" || got[0].Placement.BookedMiB() != 8192 {
		t.Errorf("holds for w: %+v, want p/target of 8192 MiB", got)
	}

	// x ends: n1 stays full, w's hold now 16 GiB.
	c.RemovePod("x")
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 16384}}; !cmp.Equal(got, want) {
		t.Errorf("n1 after x ended: %v, want still %v (x's room joined the hold)", got, want)
	}
	if _, err := c.PlaceAndAssume("z", placer, "n1", sharedRequest("default/z", "c0", 4096)); err == nil {
		t.Error("pod z placed in the room x left")
	}
	held := c.HeldFor("w", "", "default")
	if len(held) != 1 || held[0].Placement.BookedMiB() != 16384 {
		t.Fatalf("holds for w after x ended: %+v, want 16384 MiB", held)
	}
	p, key, err := c.PlaceAndAssumeHeld("w", placer, "n1", sharedRequest("default/w", "c0", 16384), []string{held[0].Key})
	if err != nil || key != "p/target" || p.BookedMiB() != 16384 {
		t.Fatalf("w placed with its hold: %v, %q, %v", p, key, err)
	}
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 16384}}; !cmp.Equal(got, want) {
		t.Errorf("n1 with w: %v, want %v", got, want)
	}
	if got := c.PlanHolds("p"); !slices.Equal(got, []string{"p/move-0"}) {
		t.Errorf("plan holds after w: %v", got)
	}
	// The replacement (another pod of rs) takes its destination.
	if got := c.HeldFor("x2", "rs", "elsewhere"); got != nil {
		t.Errorf("a pod of another namespace naming rs may take %+v", got)
	}
	held = c.HeldFor("x2", "rs", "default")
	if len(held) != 1 || held[0].Node != "n2" {
		t.Fatalf("holds for the replacement: %+v", held)
	}
	if _, key, err := c.PlaceAndAssumeHeld("x2", placer, "n2", sharedRequest("default/x2", "c0", 8192), []string{held[0].Key}); err != nil || key != "p/move-0" {
		t.Fatalf("replacement placed: %q, %v", key, err)
	}
	if got, want := usage(t, c, "n2"), []alloc.Usage{{MemoryMiB: 6144 + 8192}}; !cmp.Equal(got, want) {
		t.Errorf("n2: %v, want %v", got, want)
	}
	if got := c.PlanHolds("p"); len(got) != 0 {
		t.Errorf("plan holds at the end: %v", got)
	}
}

// TestDropPlan: a plan given up releases what it holds, its joins end (a
// moved pod that ends then frees its GPUs), and a pod placed away from
// its hold gives the hold up.
func TestDropPlan(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384))
	c.SetNode(gpuNode(t, "n2", 16384))
	c.SetPod(recordedPod(t, "x", appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 8192, 0)})))
	if err := c.Hold("p", "p/target", cache.HoldFor{Pod: "w"}, placement("n1", 0, 8192, 0), []types.UID{"x"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Hold("p", "p/move-0", cache.HoldFor{Owner: "rs", Namespace: "default"}, placement("n2", 0, 8192, 0), nil); err != nil {
		t.Fatal(err)
	}
	// A new inventory of n1 keeps the hold.
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 16384}, {}}; !cmp.Equal(got, want) {
		t.Errorf("n1 after a new inventory: %v, want %v", got, want)
	}
	if got := c.DropPlan("p"); !slices.Equal(got, []string{"p/move-0", "p/target"}) {
		t.Errorf("DropPlan: %v", got)
	}
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 8192}, {}}; !cmp.Equal(got, want) {
		t.Errorf("n1 after the drop: %v, want x alone %v", got, want)
	}
	c.RemovePod("x")
	if got, want := usage(t, c, "n1"), []alloc.Usage{{}, {}}; !cmp.Equal(got, want) {
		t.Errorf("n1 after x ended: %v, want free %v", got, want)
	}
	if got := usage(t, c, "n2"); got[0].MemoryMiB != 0 {
		t.Errorf("n2 after the drop: %v", got)
	}

	// Placed on another node than its hold's, the pod gives it up.
	if err := c.Hold("q", "q/move-0", cache.HoldFor{Owner: "rs", Namespace: "default"}, placement("n2", 0, 8192, 0), nil); err != nil {
		t.Fatal(err)
	}
	if _, key, err := c.PlaceAndAssumeHeld("x2", mustPlacer(t), "n1", sharedRequest("default/x2", "c0", 8192), []string{"q/move-0"}); err != nil || key != "q/move-0" {
		t.Fatalf("placed away from its hold: %q, %v", key, err)
	}
	if got := usage(t, c, "n2"); got[0].MemoryMiB != 0 || len(c.PlanHolds("q")) != 0 {
		t.Errorf("n2 after the pod went elsewhere: %v, holds %v", got, c.PlanHolds("q"))
	}
}
