package controlplane

import (
	"context"
	"sync"
	"sync/atomic"
)

// InFlight is how many requests Parallel keeps in flight: enough to fill
// thousands of nodes or pods in seconds without the apiserver throttling.
const InFlight = 32

// Parallel runs fn(0), ..., fn(n-1) on InFlight goroutines, for
// creating many objects at once. It stops starting calls at the first
// error, which it returns, or when ctx ends (then ctx's error).
func Parallel(ctx context.Context, n int, fn func(int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		first atomic.Pointer[error]
	)
	for range InFlight {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || first.Load() != nil || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return ctx.Err()
}
