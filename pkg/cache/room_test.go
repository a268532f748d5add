package cache_test

import (
	"context"
	"math"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/workload"
)

// The cache is what the scheduler's policy weighs keeping idle GPUs
// spare against.
var _ workload.RoomSource = (*cache.Cache)(nil)

// TestRoom: the room the nodes leave, the turnover of what the cache
// places and releases, and the GPU demand of pods that found no room
// until they are placed, bound elsewhere or gone.
func TestRoom(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	c.SetNode(gpuNode(t, "n2", 16384))
	sp := &alloc.Spare{Whole: 0.5}
	room := func() (alloc.Room, float64) { return c.Room(sp) }
	if r, w := room(); r != (alloc.Room{Idle: 3, Free: 3}) || w != 0 {
		t.Fatalf("empty cluster: room %+v, waiting %v; want 3 idle, 3 free, none waiting", r, w)
	}

	// Half a GPU placed.
	if err := c.Assume("p1", "default/p1", placement("n1", 0, 8192, 0)); err != nil {
		t.Fatal(err)
	}
	if r, w := room(); r != (alloc.Room{Idle: 2, Free: 2.5}) || w != 0 {
		t.Errorf("after half a GPU placed: room %+v, waiting %v; want 2 idle, 2.5 free, none waiting", r, w)
	}

	// A pod that found no room waits, once however often it fails.
	c.Wait("w1", sharedRequest("default/w1", "c0", 4096))
	c.Wait("w1", sharedRequest("default/w1", "c0", 4096))
	c.Wait("plain", &alloc.PodRequest{Key: "default/plain", CPUMilli: 1000})
	if _, w := room(); !near(w, 0.25) {
		t.Errorf("a pod of a quarter GPU waiting: waiting %v, want 0.25", w)
	}
	// Placed, it waits no more.
	if err := c.Assume("w1", "default/w1", placement("n1", 0, 4096, 0)); err != nil {
		t.Fatal(err)
	}
	if _, w := room(); w != 0 {
		t.Errorf("after the waiting pod was placed: waiting %v, want 0", w)
	}

	// Bound by another scheduler, without a record: it waits no more,
	// and was not turned away.
	c.Wait("w2", sharedRequest("default/w2", "c0", 16384))
	bound := podWith("w2", "n2", "")
	delete(bound.Annotations, gpusharev1.AllocationAnnotation)
	c.SetPod(bound)
	if _, w := room(); w != 0 {
		t.Errorf("after the waiting pod was bound elsewhere: waiting %v, want 0", w)
	}

	// Deleted while waiting: turned away, it counts in the window.
	c.Wait("w3", sharedRequest("default/w3", "c0", 16384))
	c.RemovePod("w3")
	if _, w := room(); !near(w, 1) {
		t.Errorf("after a waiting pod of one GPU gave up: waiting %v, want 1 (turned away)", w)
	}
	if got := c.Waiting(); got != 0 {
		t.Errorf("Waiting() = %d after the pod gave up, want 0 (only pending pods)", got)
	}

	// A recorded pod seen first counts as placed; p1 leaving releases
	// half a GPU of the 1.75 placed, and leaves n1's GPU 0 to w1.
	c.SetPod(recordedPod(t, "r1", appRecord("n2", []gpusharev1.GPUShare{share("n2", 0, 16384, 100)})))
	c.RemovePod("p1")
	if r, _ := room(); !near(r.Turnover, 0.5/1.75) || r.Idle != 1 {
		t.Errorf("after 1.75 GPUs placed and 0.5 released: turnover %v, idle %v; want %v, 1", r.Turnover, r.Idle, 0.5/1.75)
	}
	// An ended pod releases what it booked; updates of it count once.
	ended := recordedPod(t, "r1", appRecord("n2", []gpusharev1.GPUShare{share("n2", 0, 16384, 100)}))
	ended.Status.Phase = corev1.PodSucceeded
	c.SetPod(ended)
	c.SetPod(ended.DeepCopy())
	if r, _ := room(); !near(r.Turnover, 1.5/1.75) {
		t.Errorf("after the recorded pod ended: turnover %v, want %v", r.Turnover, 1.5/1.75)
	}
	// Forgetting an assumed pod takes back what it placed.
	if err := c.Assume("f", "default/f", placement("n2", 0, 16384, 100)); err != nil {
		t.Fatal(err)
	}
	c.Forget("f")
	if r, _ := room(); !near(r.Turnover, 2.5/2.75) {
		t.Errorf("after assume and forget: turnover %v, want %v", r.Turnover, 2.5/2.75)
	}
}

// near compares within the aging of the churn window over a few GPUs.
func near(a, b float64) bool { return math.Abs(a-b) < 0.005 }

// TestRoomAfterRestart: a cache that takes in a running cluster (the
// informer's first list, as after a restart) has placed nothing in the
// turnover; what it sees bound after that has. Counting the first list
// as placed made a churning cluster look as if it only filled, and
// keep idle GPUs, until the window had aged it out.
func TestRoomAfterRestart(t *testing.T) {
	before := recordedPod(t, "r1", appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 16384, 100)}))
	client := fake.NewClientset(gpuNode(t, "n1", 16384, 16384), before)
	c, _ := watched(t, client)
	ctx := context.Background()
	sp := &alloc.Spare{Whole: 0.5}
	if r, _ := c.Room(sp); r.Idle != 1 || r.Turnover != 0 {
		t.Fatalf("after the first list: room %+v; want 1 idle (r1 booked) and nothing placed or released", r)
	}
	// Half a GPU placed since, by another replica; then r1, from before,
	// leaves: the window has seen 0.5 placed and 1 released.
	after := recordedPod(t, "r2", appRecord("n1", []gpusharev1.GPUShare{share("n1", 1, 8192, 50)}))
	if _, err := client.CoreV1().Pods("default").Create(ctx, after, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { r, _ := c.Room(sp); return r.Idle == 0 })
	if r, _ := c.Room(sp); r.Turnover != 0 {
		t.Errorf("after r2 was placed: turnover %v, want 0 (nothing released)", r.Turnover)
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, before.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { r, _ := c.Room(sp); return r.Turnover > 0 })
	if r, _ := c.Room(sp); r.Turnover != 1 {
		t.Errorf("after r1 left: turnover %v; want 1 (1 GPU released, 0.5 placed since the start); counting r1 as placed gives 0.67", r.Turnover)
	}
}

// waitFor polls ok for up to 10 s.
func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}
