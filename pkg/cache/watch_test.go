package cache_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"

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
		c, stop := watched(t, fake.NewClientset(objs...))
		if got := c.LargestGPU(); got != 143771 {
			t.Errorf("round %d: synced, but the largest GPU is %d MiB; want 143771", round, got)
		}
		if got := len(c.Snapshot()); got != nodes {
			t.Errorf("round %d: synced, but the cache holds %d nodes; want %d", round, got, nodes)
		}
		stop()
	}
}

// watched returns a cache that Watch feeds from client's informers, once
// it has synced, and the func that stops them, which the test's end
// calls too.
func watched(t *testing.T, client *fake.Clientset) (*cache.Cache, func()) {
	t.Helper()
	c, _ := newCache(t)
	f := informers.NewSharedInformerFactory(client, 0)
	synced, err := cache.Watch(c, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	f.Start(ctx.Done())
	stop := sync.OnceFunc(func() { cancel(); f.Shutdown() })
	t.Cleanup(stop)
	if !cache.WaitSynced(ctx, synced) {
		t.Fatal("the cache did not sync")
	}
	return c, stop
}

// TestDropManagedFields checks the informers' transform: a pod loses
// its managedFields and keeps the rest, and a deletion tombstone passes
// unchanged.
func TestDropManagedFields(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
		Annotations:   map[string]string{"gpushare.io/allocation": "{}"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec: corev1.PodSpec{NodeName: "n1"}}
	want := pod.DeepCopy()
	want.ManagedFields = nil
	got, err := cache.DropManagedFields(pod)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transformed pod (-want +got):\n%s", diff)
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/p", Obj: want}
	got, err = cache.DropManagedFields(tomb)
	if err != nil || !cmp.Equal(got, tomb) {
		t.Errorf("tombstone: got %v, %v; want it unchanged", got, err)
	}
}
