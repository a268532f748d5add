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
