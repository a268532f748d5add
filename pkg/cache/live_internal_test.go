package cache

import (
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// TestLeaseRenewalTakesNoBookingsLock: a renewal, and Filter's check of
// a node's lease, go through while the bookings' lock is held (by a
// booking or a node's rebuild): the daemons' leases are a side store.
func TestLeaseRenewalTakesNoBookingsLock(t *testing.T) {
	c := New(klog.Background(), Options{})
	now := time.Now()
	c.SetLease("n1", now.Add(-time.Minute))
	c.mu.Lock()
	done := make(chan bool)
	go func() {
		recovered := c.SetLease("n1", now.Add(time.Minute))
		done <- recovered && c.daemons.down("n1", time.Now) == nil
	}()
	select {
	case ok := <-done:
		if !ok {
			t.Error("the renewal of an expired lease did not bring the daemon back")
		}
	case <-time.After(10 * time.Second):
		t.Error("a lease renewal waited for the bookings' lock")
	}
	c.mu.Unlock()
}
