package cache_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
)

// A node's fresh GPU usage reaches the state load-aware scoring reads; a
// stale or malformed one does not, and a sample that ages is dropped.
func TestLiveUsage(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	c, _ := newCache(t)
	c.SetClock(func() time.Time { return now })
	withUsage := func(sampled time.Time, value string) {
		t.Helper()
		n := gpuNode(t, "n1", 16384, 16384)
		if value == "" {
			u := &gpusharev1.GPUUsage{Time: metav1.NewTime(sampled), GPUs: []gpusharev1.GPULoad{{Index: 1, UsedMemoryMiB: 9000, UtilizationPercent: 70}}}
			var err error
			if value, err = gpusharev1.Marshal(u); err != nil {
				t.Fatal(err)
			}
		}
		n.Annotations[gpusharev1.UsageAnnotation] = value
		c.SetNode(n)
	}
	live := func() []alloc.Live {
		t.Helper()
		var out []alloc.Live
		if err := c.Read("n1", func(s *alloc.NodeState) { out = append(out, s.Live...) }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	fresh := []alloc.Live{{}, {Valid: true, MemoryMiB: 9000, Utilization: 70}}

	withUsage(now.Add(-time.Minute), "")
	if got := live(); !cmp.Equal(got, fresh) {
		t.Fatalf("fresh sample: %+v, want %+v", got, fresh)
	}
	now = now.Add(cache.LiveStaleAfter)
	c.ExpireLive()
	if got := live(); got != nil {
		t.Fatalf("after %v the sample is stale but still used: %+v", cache.LiveStaleAfter, got)
	}
	withUsage(now.Add(-cache.LiveStaleAfter-time.Second), "")
	if got := live(); got != nil {
		t.Fatalf("a stale sample was taken: %+v", got)
	}
	withUsage(now, `{"apiVersion":"gpushare.io/v1alpha1","kind":"GPUUsage","time":"2026-11-21T12:03:00Z","gpus":[{"index":0,"utilizationPercent":250}]}`)
	if got := live(); got != nil {
		t.Fatalf("a malformed sample was taken: %+v", got)
	}
}

// Live use from the daemon's lease reaches load-aware scoring, survives
// updates of a Node that holds none, and reaches a node seen after its
// lease; a newer sample on the Node (a daemon from before the use moved
// to the lease) wins, and forgetting the lease falls back to the Node's.
func TestLiveUsageFromLease(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	c, _ := newCache(t)
	c.SetClock(func() time.Time { return now })
	sample := func(at time.Time, mem int64) *gpusharev1.GPUUsage {
		return &gpusharev1.GPUUsage{Time: metav1.NewTime(at), GPUs: []gpusharev1.GPULoad{{Index: 1, UsedMemoryMiB: mem, UtilizationPercent: 70}}}
	}
	live := func() []alloc.Live {
		t.Helper()
		var out []alloc.Live
		if err := c.Read("n1", func(s *alloc.NodeState) { out = append(out, s.Live...) }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := func(mem int64) []alloc.Live {
		return []alloc.Live{{}, {Valid: true, MemoryMiB: mem, Utilization: 70}}
	}

	c.SetLive("n1", sample(now.Add(-time.Minute), 9000))
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	if got := live(); !cmp.Equal(got, want(9000)) {
		t.Fatalf("node seen after its lease: %+v, want %+v", got, want(9000))
	}
	c.SetLive("n1", sample(now, 9500))
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	if got := live(); !cmp.Equal(got, want(9500)) {
		t.Fatalf("after a Node update without usage: %+v, want the lease's %+v", got, want(9500))
	}

	n := gpuNode(t, "n1", 16384, 16384)
	older, err := gpusharev1.Marshal(sample(now.Add(-time.Minute), 1000))
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[gpusharev1.UsageAnnotation] = older
	c.SetNode(n)
	if got := live(); !cmp.Equal(got, want(9500)) {
		t.Fatalf("an older sample on the Node replaced the lease's: %+v", got)
	}
	now = now.Add(time.Second)
	newer, err := gpusharev1.Marshal(sample(now, 2000))
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[gpusharev1.UsageAnnotation] = newer
	c.SetNode(n)
	if got := live(); !cmp.Equal(got, want(2000)) {
		t.Fatalf("a newer sample on the Node: %+v, want %+v", got, want(2000))
	}
	c.SetLive("n1", sample(now.Add(time.Second), 9700))
	if got := live(); !cmp.Equal(got, want(9700)) {
		t.Fatalf("a newer sample on the lease: %+v, want %+v", got, want(9700))
	}
	c.RemoveLease("n1")
	if got := live(); !cmp.Equal(got, want(2000)) {
		t.Fatalf("lease gone: %+v, want the Node's %+v", got, want(2000))
	}
	c.SetLive("n1", sample(now.Add(-cache.LiveStaleAfter-time.Minute), 100))
	if got := live(); !cmp.Equal(got, want(2000)) {
		t.Fatalf("a stale lease sample was taken: %+v", got)
	}
}
