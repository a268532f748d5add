package cdi

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// A container's CDI spec is read when the runtime creates the container,
// right after PreStartContainer, and written again whenever the container
// starts again. So the daemon removes the specs that no container holding
// their devices can need, lest a node gather one file per container it
// ever ran, which the runtime reads with every change.

// SweepEvery is how often the daemon removes unused CDI specs.
const SweepEvery = 10 * time.Minute

// KeepSpecsFor is how long a spec is kept at the least: an init
// container's claim is listed by no PodResources listing, and its spec is
// read within seconds of being written.
const KeepSpecsFor = time.Minute

// Claims says which claims still need their specs.
type Claims interface {
	// Held returns the claims that containers hold, in a PodResources
	// listing begun now or later.
	Held(ctx context.Context) (map[string]bool, error)
	// WithPending calls fn under the lock that spec writes are renamed
	// into place under; pending reports whether Allocate has named claim
	// and its container has not started.
	WithPending(fn func(pending func(claim string) bool))
}

// Sweeper removes the unused CDI specs of one directory.
type Sweeper struct {
	Dir string
	// CacheDir, if set, holds a file <claim>.cache for some claims
	// (HAMi-core's usage caches, HAMiCore.LockDir): it goes with its
	// claim's spec.
	CacheDir string
	Claims   Claims
	Logger   klog.Logger
	// Clock is the real clock if nil.
	Clock clock.PassiveClock
}

// Run removes unused CDI specs now and every interval until ctx ends.
func (s *Sweeper) Run(ctx context.Context, every time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		removed, err := s.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.Logger.Error(err, "Removing unused CDI specs")
		case removed > 0:
			s.Logger.V(2).Info("Removed unused CDI specs", "count", removed)
		}
	}, every)
}

// Sweep removes the CDI specs written over KeepSpecsFor ago whose claim
// no container holds, in a PodResources listing begun after that, and
// that no Allocate has named since; and files staged for a spec and left
// behind. It returns how many files it removed. Other files are never
// touched.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return 0, err
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if s.Clock != nil {
		clk = s.Clock
	}
	removed := 0
	written := clk.Now().Add(-KeepSpecsFor)
	var old []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || info.ModTime().After(written) {
			continue
		}
		switch name := e.Name(); {
		case strings.HasPrefix(name, stagedPrefix) && strings.HasSuffix(name, stagedSuffix):
			// Staged and not renamed: the daemon stopped in between.
			if os.Remove(filepath.Join(s.Dir, name)) == nil {
				removed++
			}
		case specClaim(name) != "":
			old = append(old, specClaim(name))
		}
	}
	if len(old) == 0 {
		return removed, nil
	}
	held, err := s.Claims.Held(ctx)
	if err != nil {
		return removed, err
	}
	// Under the lock that spec writes rename under: a spec written again
	// between the check and the removal would be lost.
	s.Claims.WithPending(func(pending func(string) bool) {
		for _, claim := range old {
			if held[claim] || pending(claim) {
				continue
			}
			path := SpecPath(s.Dir, claim)
			if info, err := os.Stat(path); err != nil || info.ModTime().After(written) {
				continue
			}
			if os.Remove(path) == nil {
				removed++
				if s.CacheDir != "" {
					_ = os.Remove(filepath.Join(s.CacheDir, claim+".cache"))
				}
			}
		}
	})
	return removed, nil
}
