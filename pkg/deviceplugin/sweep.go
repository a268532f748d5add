package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// A container's CDI spec is read when the runtime creates the container,
// right after PreStartContainer, and written again whenever the container
// starts again. So the daemon removes the specs that no container holding
// their devices can need, lest a node gather one file per container it
// ever ran, which the runtime reads with every change.

// sweepSpecsEvery is how often the daemon removes unused CDI specs.
const sweepSpecsEvery = 10 * time.Minute

// keepSpecsFor is how long a spec is kept at the least: an init
// container's claim is listed by no PodResources listing, and its spec is
// read within seconds of being written.
const keepSpecsFor = time.Minute

// sweepEvery removes unused CDI specs now and every interval until ctx
// ends.
func (m *Manager) sweepEvery(ctx context.Context, every time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		removed, err := m.sweepSpecs(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			m.logger.Error(err, "Removing unused CDI specs")
		case removed > 0:
			m.logger.V(2).Info("Removed unused CDI specs", "count", removed)
		}
	}, every)
}

// sweepSpecs removes the CDI specs written over keepSpecsFor ago whose
// claim no container holds, in a PodResources listing begun after that,
// and that no Allocate has named since; and files staged for a spec and
// left behind. It returns how many files it removed.
func (m *Manager) sweepSpecs(ctx context.Context) (int, error) {
	entries, err := os.ReadDir(m.cfg.CDIDir)
	if err != nil {
		return 0, err
	}
	removed := 0
	written := time.Now().Add(-keepSpecsFor)
	var old []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || info.ModTime().After(written) {
			continue
		}
		switch name := e.Name(); {
		case strings.HasPrefix(name, ".gpushare-") && strings.HasSuffix(name, ".tmp"):
			// Staged and not renamed: the daemon stopped in between.
			if os.Remove(filepath.Join(m.cfg.CDIDir, name)) == nil {
				removed++
			}
		case specClaim(name) != "":
			old = append(old, specClaim(name))
		}
	}
	if len(old) == 0 {
		return removed, nil
	}
	l, err := m.pr.list(ctx, time.Now())
	if err != nil {
		return removed, err
	}
	held := map[string]bool{}
	for i := range l.containers {
		for _, h := range l.containers[i].held {
			held[claimOf(h.resource, h.ids.sorted())] = true
		}
	}
	// Under the lock that spec writes rename under: a spec written again
	// between the check and the removal would be lost.
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, claim := range old {
		if held[claim] || m.claims[claim] != nil {
			continue
		}
		path := SpecPath(m.cfg.CDIDir, claim)
		if info, err := os.Stat(path); err != nil || info.ModTime().After(written) {
			continue
		}
		if os.Remove(path) == nil {
			removed++
		}
	}
	return removed, nil
}
