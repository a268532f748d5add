package cache_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
)

// WatchLeases hands the live use a daemon's lease carries to the cache,
// and each new sample a renewal brings.
func TestWatchLeasesLiveUse(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	lease := func(mem int64) *coordinationv1.Lease {
		v, err := gpusharev1.Marshal(&gpusharev1.GPUUsage{Time: metav1.Now(),
			GPUs: []gpusharev1.GPULoad{{Index: 0, UsedMemoryMiB: mem, UtilizationPercent: 30}}})
		if err != nil {
			t.Fatal(err)
		}
		now, secs, holder := metav1.NowMicro(), int32(40), "n1"
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: gpusharev1.LeaseNamespace, Name: gpusharev1.LeasePrefix + "n1",
				Annotations: map[string]string{gpusharev1.UsageAnnotation: v}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now},
		}
	}
	client := fake.NewClientset(lease(7000))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		cache.WatchLeases(ctx, c, client, nil)
	}()
	defer func() { cancel(); <-done }()
	waitLive := func(mem int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var got alloc.Live
			if err := c.Read("n1", func(s *alloc.NodeState) {
				if len(s.Live) > 0 {
					got = s.Live[0]
				}
			}); err != nil {
				t.Fatal(err)
			}
			if got.Valid && got.MemoryMiB == mem {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("live use of GPU 0 is %+v, want %d MiB from the lease", got, mem)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitLive(7000)
	if _, err := client.CoordinationV1().Leases(gpusharev1.LeaseNamespace).Update(ctx, lease(3000), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLive(3000)
}
