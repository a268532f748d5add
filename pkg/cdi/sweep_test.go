package cdi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// claims are the claims containers hold and those pending.
type claims struct{ held, pending map[string]bool }

func (c claims) Held(context.Context) (map[string]bool, error) { return c.held, nil }

func (c claims) WithPending(fn func(pending func(string) bool)) {
	fn(func(claim string) bool { return c.pending[claim] })
}

// The sweep removes the CDI specs of claims that no container holds and
// that no Allocate has named since, written over KeepSpecsFor ago, and
// files staged for a spec and left behind. It keeps the specs of
// containers holding their devices, of pending claims, recent specs, and
// every file that is not gpushare's.
func TestSweepSpecs(t *testing.T) {
	dir := t.TempDir()
	a, b := ClaimOf("gpushare.io/gpu-mem", []string{"1-0", "1-1"}), ClaimOf("gpushare.io/gpu-mem", []string{"1-2"})
	pending := ClaimOf("gpushare.io/gpu-mem", []string{"0-2"})
	path := func(name string) string { return filepath.Join(dir, name) }
	unheld := SpecPath(dir, ClaimOf("gpushare.io/gpu-mem", []string{"0-0"}))
	staged := path(stagedPrefix + pending + "-123" + stagedSuffix)
	keep := []string{SpecPath(dir, a), SpecPath(dir, b), SpecPath(dir, pending),
		path("vendor.json"), path("gpushare-notaclaim.json"),
		// A DRA claim's spec (pkg/dra): the kubelet unprepares it.
		path("gpushare-dra-df1b0b97-2b40-442b-ab7b-4464e3d5cc93-gpu.json")}
	for _, f := range append([]string{unheld, staged}, keep...) {
		if err := os.WriteFile(f, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * KeepSpecsFor)
	for _, f := range append([]string{unheld, staged}, keep...) {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	recent := SpecPath(dir, ClaimOf("gpushare.io/gpu-mem", []string{"0-1"}))
	if err := os.WriteFile(recent, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, recent)

	// HAMi-core's usage caches go with their claims' specs.
	caches := t.TempDir()
	unheldCache := filepath.Join(caches, ClaimOf("gpushare.io/gpu-mem", []string{"0-0"})+".cache")
	heldCache := filepath.Join(caches, a+".cache")
	for _, f := range []string{unheldCache, heldCache} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keep = append(keep, heldCache)

	logger, _ := ktesting.NewTestContext(t)
	s := &Sweeper{Dir: dir, CacheDir: caches, Logger: logger,
		Claims: claims{held: map[string]bool{a: true, b: true}, pending: map[string]bool{pending: true}}}
	removed, err := s.Sweep(context.Background())
	if err != nil || removed != 2 {
		t.Errorf("sweep removed %d files (%v); want 2", removed, err)
	}
	for _, f := range []string{unheld, staged, unheldCache} {
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
