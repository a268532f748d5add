package controlplane

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// TestParallel: every index once; an error stops new calls and is
// returned; a cancelled context is returned when nothing failed.
func TestParallel(t *testing.T) {
	const n = 1000
	var calls [n]atomic.Int32
	if err := Parallel(context.Background(), n, func(i int) error { calls[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("fn(%d) called %d times, want once", i, c)
		}
	}

	boom := errors.New("boom")
	var done atomic.Int32
	// Calls from index 10 on fail: each goroutine makes at most one
	// failing call before it sees an error recorded.
	err := Parallel(context.Background(), n, func(i int) error {
		done.Add(1)
		if i >= 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || done.Load() > 10+InFlight {
		t.Errorf("error %v after %d calls; want boom after at most %d", err, done.Load(), 10+InFlight)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Parallel(ctx, n, func(int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}
