package cache_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/pkg/cache"
)

// TestWatchSynced: once Watch's synced func reports true, the cache holds
// every node of the informers' first list, the largest GPU included. A
// scheduler that decided as soon as its informers synced saw part of the
// cluster and turned away pods that only the missing nodes could hold.
func TestWatchSynced(t *testing.T) {
	for round := range 20 {
		var objs []runtime.Object
		const nodes = 200
		for i := range nodes {
			mib := int64(16384)
			if i == nodes-1 {
				mib = 143771 // the one large GPU, listed last
			}
			objs = append(objs, gpuNode(t, fmt.Sprintf("n%03d", i), mib))
		}
		client := fake.NewClientset(objs...)
		c, _ := newCache(t)
		f := informers.NewSharedInformerFactory(client, 0)
		synced, err := cache.Watch(c, f)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		f.Start(ctx.Done())
		if !cache.WaitSynced(ctx, synced) {
			cancel()
			t.Fatal("the cache did not sync")
		}
		if got := c.LargestGPU(); got != 143771 {
			t.Errorf("round %d: synced, but the largest GPU is %d MiB; want 143771", round, got)
		}
		if got := len(c.Snapshot()); got != nodes {
			t.Errorf("round %d: synced, but the cache holds %d nodes; want %d", round, got, nodes)
		}
		cancel()
		f.Shutdown()
	}
}
