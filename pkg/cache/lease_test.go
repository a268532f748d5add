package cache_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
)

// A node whose daemon let its lease expire is offered to no pod until the
// lease is renewed; a node without a lease is judged by none.
func TestDaemonLease(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c, _ := newCache(t)
	c.SetClock(func() time.Time { return now })
	c.SetNode(gpuNode(t, "n1", 16384))
	c.SetNode(gpuNode(t, "n2", 16384))
	read := func(node string) error { return c.Read(node, func(*alloc.NodeState) {}) }
	if err := read("n1"); err != nil {
		t.Fatalf("a node without a lease: %v", err)
	}
	if c.SetLease("n1", now.Add(40*time.Second)) {
		t.Error("a first lease reported as a recovery")
	}
	now = now.Add(41 * time.Second)
	if err := read("n1"); !errors.Is(err, cache.ErrDaemonDown) {
		t.Fatalf("Read of a node whose lease expired = %v, want ErrDaemonDown", err)
	}
	var seen []string
	c.ReadEach([]string{"n1", "n2"}, func(name string, _ *alloc.NodeState, _ *alloc.Summary, err error) {
		if err == nil {
			seen = append(seen, name)
		}
	})
	if len(seen) != 1 || seen[0] != "n2" {
		t.Fatalf("ReadEach offered %v, want n2 alone", seen)
	}
	if _, err := c.PlaceAndAssume("p", mustPlacer(t), "n1", sharedRequest("default/p", "c0", 1024)); !errors.Is(err, cache.ErrDaemonDown) {
		t.Fatalf("PlaceAndAssume on a node whose daemon is down = %v, want ErrDaemonDown", err)
	}
	if !c.SetLease("n1", now.Add(40*time.Second)) {
		t.Error("a renewed lease after expiry not reported as a recovery")
	}
	if err := read("n1"); err != nil {
		t.Fatalf("after the renewal: %v", err)
	}
	c.RemoveLease("n1")
	now = now.Add(time.Hour)
	if err := read("n1"); err != nil {
		t.Fatalf("after the lease was removed: %v", err)
	}
}
