package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The sweep removes the CDI specs of claims that no container holds and
// that no Allocate has named since, written over keepSpecsFor ago, and
// files staged for a spec and left behind. It keeps the specs of
// containers holding their devices, of pending claims, recent specs, and
// every file that is not gpushare's.
func TestSweepSpecs(t *testing.T) {
	n := resolveNode{startNode(t), t}
	n.admit("a", "b")
	for _, pod := range []string{"a", "b"} {
		if _, err := n.start(n.pod(pod), "main"); err != nil {
			t.Fatalf("starting %s: %v", pod, err)
		}
	}
	pending := claimOf(memResource, []string{"0-2"})
	n.m.noteAllocated(pending)
	path := func(name string) string { return filepath.Join(n.cdiDir, name) }
	unheld := SpecPath(n.cdiDir, claimOf(memResource, []string{"0-0"}))
	staged := path(".gpushare-" + pending + "-123.tmp")
	keep := []string{SpecPath(n.cdiDir, n.claim("a")), SpecPath(n.cdiDir, n.claim("b")), SpecPath(n.cdiDir, pending),
		path("vendor.json"), path("gpushare-notaclaim.json")}
	for _, f := range append([]string{unheld, staged}, keep[2:]...) {
		if err := os.WriteFile(f, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * keepSpecsFor)
	for _, f := range append([]string{unheld, staged}, keep...) {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	recent := SpecPath(n.cdiDir, claimOf(memResource, []string{"0-1"}))
	if err := os.WriteFile(recent, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, recent)

	removed, err := n.m.sweepSpecs(context.Background())
	if err != nil || removed != 2 {
		t.Errorf("sweep removed %d files (%v); want 2", removed, err)
	}
	for _, f := range []string{unheld, staged} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v); want it removed", filepath.Base(f), err)
		}
	}
	for _, f := range keep {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v; want it kept", filepath.Base(f), err)
		}
	}
}
