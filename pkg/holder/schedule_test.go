package holder

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/clock"
)

// The prefetch's timing is tested in a synctest bubble: its clock is the
// bubble's, which moves only when every goroutine in it waits, so the
// tests take no wall time and do not depend on the machine's speed.

// newScheduled returns claims that count their prefetches instead of
// asking a kubelet, prefetching after after.
func newScheduled(after time.Duration, fired *atomic.Int32) *Resolver {
	c := &Resolver{clock: clock.RealClock{}, after: after, pending: map[string]*pending{}}
	c.fetch = func() { fired.Add(1) }
	return c
}

func (c *Resolver) scheduleNow(retry int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.schedule(retry)
}

// TestPrefetchDuringBurst: allocations that come faster than the prefetch
// delay do not put the prefetch off until the burst ends; it runs every
// delay meanwhile.
func TestPrefetchDuringBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fired atomic.Int32
		c := newScheduled(20*time.Millisecond, &fired)
		defer c.Close()
		// An allocation every 2 ms for 200 ms, bubble time.
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
			c.scheduleNow(0)
			time.Sleep(2 * time.Millisecond)
			synctest.Wait()
		}
		if n := fired.Load(); n != 10 {
			t.Errorf("a 200 ms burst of allocations, one every 2 ms, prefetched %d times; want 10 (one every 20 ms)", n)
		}
	})
}

// A retry waits twice as long as the try before: 5, 10, 20, 40, 80 and
// 160 ms after it is scheduled.
func TestPrefetchBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fired atomic.Int32
		c := newScheduled(prefetchAfter, &fired)
		defer c.Close()
		for retry := range maxPrefetchRetries + 1 {
			c.scheduleNow(retry)
			delay := prefetchAfter << retry
			time.Sleep(delay - time.Millisecond)
			synctest.Wait()
			if n := fired.Load(); n != int32(retry) {
				t.Fatalf("retry %d: prefetched %d times %v after it was scheduled; want %d", retry, n, delay-time.Millisecond, retry)
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if n := fired.Load(); n != int32(retry+1) {
				t.Fatalf("retry %d: prefetched %d times %v after it was scheduled; want %d", retry, n, delay, retry+1)
			}
		}
	})
}
