package cache_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"weak"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/record"
)

// ignoreMemo leaves out NodeState's unexported cache of derived data.
var ignoreMemo = cmpopts.IgnoreUnexported(alloc.NodeState{})

func TestSetNodeAndPodBook(t *testing.T) {
	c, logs := newCache(t)
	c.SetNode(gpuNode(t, "n1", 40960, 40960, 20480))
	if err := c.NodeError("n1"); err != nil {
		t.Fatalf("NodeError(n1) = %v, want nil", err)
	}
	if got, want := usage(t, c, "n1"), make([]alloc.Usage, 3); !cmp.Equal(got, want) {
		t.Fatalf("a new node books %v, want nothing", got)
	}

	a := appRecord("n1",
		[]gpusharev1.GPUShare{share("n1", 0, 10240, 30), share("n1", 2, 2048, 5)},
		[]gpusharev1.GPUShare{share("n1", 0, 4096, 20)})
	b := appRecord("n1", []gpusharev1.GPUShare{share("n1", 2, 8192, 50)})
	c.SetPod(recordedPod(t, "a", a))
	c.SetPod(recordedPod(t, "b", b))

	want := appUsage(3, a, b)
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Errorf("Read books %v, want %v", got, want)
	}
	snap := c.Snapshot()
	if len(snap) != 1 || snap[0].Node.Name != "n1" {
		t.Fatalf("Snapshot has %d nodes, want n1 only", len(snap))
	}
	if !cmp.Equal(snap[0].GPUs, want) {
		t.Errorf("Snapshot books %v, want %v", snap[0].GPUs, want)
	}
	for _, uid := range []types.UID{"a", "b"} {
		p, assumed := c.Holding(uid)
		if p == nil || assumed || p.Node != "n1" {
			t.Errorf("Holding(%s) = %+v, assumed %v; want a recorded placement on n1", uid, p, assumed)
		}
	}
	if errs := logs.matching("error"); len(errs) != 0 {
		t.Errorf("valid records logged errors:\n%s", strings.Join(errs, "\n"))
	}

	// The snapshot is a copy: changing it changes nothing in the cache.
	snap[0].GPUs[0].MemoryMiB = 1
	snap[0].Node.GPUs[0].Healthy = false
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Errorf("changing a snapshot changed the cache: %v, want %v", got, want)
	}
	if again := c.Snapshot(); !again[0].Node.GPUs[0].Healthy {
		t.Error("changing a snapshot's node changed the cache's node")
	}

	// The same pod delivered again (an unchanged update) books nothing more.
	c.SetPod(recordedPod(t, "a", a))
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Errorf("after a repeated update: %v, want %v", got, want)
	}
}

func TestSnapshotSortedByName(t *testing.T) {
	c, _ := newCache(t)
	for _, n := range []string{"node-c", "node-a", "node-b"} {
		c.SetNode(gpuNode(t, n, 1024))
	}
	var names []string
	for _, s := range c.Snapshot() {
		names = append(names, s.Node.Name)
	}
	if want := []string{"node-a", "node-b", "node-c"}; !cmp.Equal(names, want) {
		t.Errorf("Snapshot order %v, want %v", names, want)
	}
}

// A booked record is not changed by an edit of the annotation: the edit
// is reported and the pod keeps what it was bound with. The same record
// written again (other formatting) is no change.
func TestBookedRecordIsNotChanged(t *testing.T) {
	c, logs := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	first := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4096, 10)})
	second := appRecord("n1", []gpusharev1.GPUShare{share("n1", 1, 2048, 40)})
	c.SetPod(recordedPod(t, "p", first))
	c.SetPod(recordedPod(t, "p", second))
	c.SetPod(recordedPod(t, "p", second))
	if got, want := usage(t, c, "n1"), appUsage(2, first); !cmp.Equal(got, want) {
		t.Errorf("after the record changed: %v, want the first record's booking %v", got, want)
	}
	if got := logs.matching("Ignoring the pod's allocation record", "changed after the pod was bound"); len(got) != 1 {
		t.Errorf("want the change reported once, got log:\n%s", logs)
	}
	value, err := gpusharev1.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	c.SetPod(podWith("p", "n1", " "+value))
	if got, want := usage(t, c, "n1"), appUsage(2, first); !cmp.Equal(got, want) {
		t.Errorf("after the same record again: %v, want %v", got, want)
	}
	c.RemovePod("p")
	if got := usage(t, c, "n1"); !cmp.Equal(got, make([]alloc.Usage, 2)) {
		t.Errorf("after RemovePod: %v, want nothing", got)
	}
}

func TestPodReleasesExactlyWhatItBooked(t *testing.T) {
	ends := map[string]func(*cache.Cache, *corev1.Pod){
		"deleted": func(c *cache.Cache, p *corev1.Pod) { c.RemovePod(p.UID) },
		"succeeded": func(c *cache.Cache, p *corev1.Pod) {
			p = p.DeepCopy()
			p.Status.Phase = corev1.PodSucceeded
			c.SetPod(p)
		},
		"failed": func(c *cache.Cache, p *corev1.Pod) {
			p = p.DeepCopy()
			p.Status.Phase = corev1.PodFailed
			c.SetPod(p)
		},
		"failed, record removed": func(c *cache.Cache, p *corev1.Pod) {
			p = p.DeepCopy()
			p.Status.Phase = corev1.PodFailed
			p.Annotations = nil
			c.SetPod(p)
		},
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			c, _ := newCache(t)
			c.SetNode(gpuNode(t, "n1", 16384, 16384))
			// Another pod shares GPU 0, so the state to return to is not
			// empty.
			other := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 3000, 15)})
			c.SetPod(recordedPod(t, "other", other))
			before := c.Snapshot()

			a := appRecord("n1",
				[]gpusharev1.GPUShare{share("n1", 0, 5000, 25), share("n1", 1, 7000, 35)})
			pod := recordedPod(t, "p", a)
			c.SetPod(pod)
			if got, want := usage(t, c, "n1"), appUsage(2, other, a); !cmp.Equal(got, want) {
				t.Fatalf("booked %v, want %v", got, want)
			}

			end(c, pod)
			if diff := cmp.Diff(before, c.Snapshot(), ignoreMemo); diff != "" {
				t.Errorf("state after the pod ended differs from before it (-before +after):\n%s", diff)
			}
			if p, _ := c.Holding(pod.UID); p != nil {
				t.Errorf("Holding = %+v after the pod ended, want nil", p)
			}
			// A late update of the ended pod releases nothing more.
			end(c, pod)
			if diff := cmp.Diff(before, c.Snapshot(), ignoreMemo); diff != "" {
				t.Errorf("ending the pod twice released more (-before +after):\n%s", diff)
			}
		})
	}
}

func TestEndedPodBooksNothing(t *testing.T) {
	for _, phase := range []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed} {
		t.Run(string(phase), func(t *testing.T) {
			c, _ := newCache(t)
			c.SetNode(gpuNode(t, "n1", 16384))
			pod := recordedPod(t, "p", appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4096, 10)}))
			pod.Status.Phase = phase
			c.SetPod(pod)
			if got := usage(t, c, "n1"); !cmp.Equal(got, make([]alloc.Usage, 1)) {
				t.Errorf("a %s pod books %v, want nothing", phase, got)
			}
			if p, _ := c.Holding(pod.UID); p != nil {
				t.Errorf("Holding = %+v, want nil", p)
			}
		})
	}
}

func TestAssumeThenForgetIsIdentity(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	c.SetNode(gpuNode(t, "n2", 8192))
	c.SetPod(recordedPod(t, "other", appRecord("n1", []gpusharev1.GPUShare{share("n1", 1, 1000, 10)})))
	before := c.Snapshot()

	p := placement("n1", 1, 6000, 40)
	if err := c.Assume("p", "default/p", p); err != nil {
		t.Fatalf("Assume: %v", err)
	}
	want := usage(t, c, "n2")
	got := usage(t, c, "n1")
	if got[1].MemoryMiB != 1000+6000 || got[1].Compute != 10+40 {
		t.Fatalf("after Assume GPU 1 books %+v, want {7000 50}", got[1])
	}
	if h, assumed := c.Holding("p"); h != p || !assumed {
		t.Errorf("Holding = %p, assumed %v; want the assumed placement %p", h, assumed, p)
	}
	if !cmp.Equal(want, make([]alloc.Usage, 1)) {
		t.Errorf("Assume on n1 booked %v on n2", want)
	}

	c.Forget("p")
	if diff := cmp.Diff(before, c.Snapshot(), ignoreMemo); diff != "" {
		t.Errorf("Assume then Forget changed the cache (-before +after):\n%s", diff)
	}
	if h, _ := c.Holding("p"); h != nil {
		t.Errorf("Holding = %+v after Forget, want nil", h)
	}
	// Forgetting a pod the cache does not hold changes nothing.
	c.Forget("p")
	c.Forget("unknown")
	if diff := cmp.Diff(before, c.Snapshot(), ignoreMemo); diff != "" {
		t.Errorf("Forget of unknown pods changed the cache (-before +after):\n%s", diff)
	}
}

func TestAssumeReplacesEarlierAssumption(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	if err := c.Assume("p", "default/p", placement("n1", 0, 4000, 20)); err != nil {
		t.Fatal(err)
	}
	if err := c.Assume("p", "default/p", placement("n1", 1, 3000, 10)); err != nil {
		t.Fatal(err)
	}
	want := []alloc.Usage{{}, {MemoryMiB: 3000, Compute: 10}}
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Errorf("after re-assuming: %v, want only the second placement %v", got, want)
	}
}

func TestForgetKeepsRecordedPlacement(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384))
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4096, 10)})
	c.SetPod(recordedPod(t, "p", a))
	c.Forget("p")
	if got, want := usage(t, c, "n1"), appUsage(1, a); !cmp.Equal(got, want) {
		t.Errorf("Forget released a recorded pod: %v, want %v", got, want)
	}
	if h, assumed := c.Holding("p"); h == nil || assumed {
		t.Errorf("Holding = %+v, assumed %v; want the recorded placement", h, assumed)
	}
}

func TestAssumeThenRecordDoesNotDoubleBook(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	p := placement("n1", 1, 6144, 30)
	if err := c.Assume("p", "default/p", p); err != nil {
		t.Fatal(err)
	}
	want := []alloc.Usage{{}, {MemoryMiB: 6144, Compute: 30}}
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Fatalf("after Assume: %v, want %v", got, want)
	}

	// The informer sees the pod before its record is written: the
	// assumption stays.
	unrecorded := podWith("p", "", "")
	delete(unrecorded.Annotations, gpusharev1.AllocationAnnotation)
	c.SetPod(unrecorded)
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Errorf("a pod update without a record changed the booking: %v, want %v", got, want)
	}
	if _, assumed := c.Holding("p"); !assumed {
		t.Error("a pod update without a record ended the assumption")
	}

	// Then with the record of the same placement, bound.
	value, err := gpusharev1.Marshal(record.Record(p))
	if err != nil {
		t.Fatal(err)
	}
	pod := podWith("p", "n1", value)
	c.SetPod(pod)
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Errorf("after the informer delivered the record: %v, want %v (booked once)", got, want)
	}
	if h, assumed := c.Holding("p"); h == nil || assumed {
		t.Errorf("Holding = %+v, assumed %v; want the recorded placement", h, assumed)
	}
	// Later updates of the pod do not book it again.
	c.SetPod(pod.DeepCopy())
	c.SetPod(pod.DeepCopy())
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Errorf("after repeated updates: %v, want %v", got, want)
	}
	// And deleting it releases it entirely.
	c.RemovePod("p")
	if got := usage(t, c, "n1"); !cmp.Equal(got, make([]alloc.Usage, 2)) {
		t.Errorf("after RemovePod: %v, want nothing booked", got)
	}
}

func TestAssumeFails(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384))
	c.SetPod(recordedPod(t, "other", appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 10000, 60)})))
	before := c.Snapshot()

	tests := []struct {
		name string
		p    *alloc.Placement
		want error
	}{
		{"unknown node", placement("n9", 0, 1, 1), cache.ErrNodeGone},
		{"too much memory", placement("n1", 0, 16384-10000+1, 0), alloc.ErrOvercommit},
		{"too much compute", placement("n1", 0, 0, 100-60+1), alloc.ErrOvercommit},
		{"no such GPU", placement("n1", 1, 1, 1), alloc.ErrWrongNode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Assume("p", "default/p", tc.p)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Assume = %v, want %v", err, tc.want)
			}
			if diff := cmp.Diff(before, c.Snapshot(), ignoreMemo); diff != "" {
				t.Errorf("a failed Assume changed the cache (-before +after):\n%s", diff)
			}
			if h, _ := c.Holding("p"); h != nil {
				t.Errorf("Holding = %+v after a failed Assume, want nil", h)
			}
		})
	}
}

// A failed re-assumption on the same node keeps the pod's earlier booking.
func TestFailedAssumeKeepsEarlierBookingSameNode(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	old := placement("n1", 0, 4096, 20)
	if err := c.Assume("p", "default/p", old); err != nil {
		t.Fatal(err)
	}
	before := c.Snapshot()
	if err := c.Assume("p", "default/p", placement("n1", 1, 16385, 0)); !errors.Is(err, alloc.ErrOvercommit) {
		t.Fatalf("Assume = %v, want %v", err, alloc.ErrOvercommit)
	}
	if diff := cmp.Diff(before, c.Snapshot(), ignoreMemo); diff != "" {
		t.Errorf("a failed Assume changed the cache (-before +after):\n%s", diff)
	}
	if h, _ := c.Holding("p"); h != old {
		t.Errorf("Holding = %+v, want the earlier placement", h)
	}
}

// A failed re-assumption on another node must keep the pod's earlier
// booking where it was and leave the other node as it was.
func TestFailedAssumeKeepsEarlierBookingOtherNode(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384))
	c.SetNode(gpuNode(t, "n2", 16384))
	old := placement("n1", 0, 4096, 20)
	if err := c.Assume("p", "default/p", old); err != nil {
		t.Fatal(err)
	}
	before := c.Snapshot()
	if err := c.Assume("p", "default/p", placement("n2", 0, 16385, 0)); !errors.Is(err, alloc.ErrOvercommit) {
		t.Fatalf("Assume = %v, want %v", err, alloc.ErrOvercommit)
	}
	if diff := cmp.Diff(before, c.Snapshot(), ignoreMemo); diff != "" {
		t.Errorf("a failed Assume on n2 changed the cache (-before +after):\n%s", diff)
	}
	// Forgetting the pod must then release its booking on n1.
	c.Forget("p")
	for _, s := range c.Snapshot() {
		if !cmp.Equal(s.GPUs, make([]alloc.Usage, 1)) || !s.Node.GPUs[0].Healthy {
			t.Errorf("after Forget node %s books %v, GPU 0 healthy %v; want nothing booked and healthy", s.Node.Name, s.GPUs, s.Node.GPUs[0].Healthy)
		}
	}
}

func TestBadRecordBooksNothing(t *testing.T) {
	good := func() *gpusharev1.Allocation {
		return appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 1024, 10), share("n1", 1, 1024, 10)})
	}
	marshal := func(a *gpusharev1.Allocation) string {
		v, err := gpusharev1.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	invalid := good()
	invalid.Containers[0].GPUs[0].Compute = 150
	otherNode := good()
	otherNode.Node = "n2"

	tests := []struct {
		name string
		pod  *corev1.Pod
		// why is what the logged error must say.
		why string
	}{
		{"pod not bound", podWith("p", "", marshal(good())), "not bound to a node"},
		{"malformed JSON", podWith("p", "n1", `{"apiVersion":`), gpusharev1.AllocationAnnotation},
		{"empty annotation", podWith("p", "n1", ""), gpusharev1.AllocationAnnotation},
		{"invalid record", podWith("p", "n1", marshal(invalid)), "containers[0].gpus[0].compute"},
		{"bound to another node", podWith("p", "n1", marshal(otherNode)), "bound to node n1 but its allocation is for node n2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, logs := newCache(t)
			c.SetNode(gpuNode(t, "n1", 16384, 16384))
			c.SetNode(gpuNode(t, "n2", 16384, 16384))
			before := c.Snapshot()
			c.SetPod(tc.pod)
			if diff := cmp.Diff(before, c.Snapshot(), ignoreMemo); diff != "" {
				t.Errorf("a bad record changed the cache (-before +after):\n%s", diff)
			}
			if h, _ := c.Holding(tc.pod.UID); h != nil {
				t.Errorf("Holding = %+v, want nil for a bad record", h)
			}
			if got := logs.matching("Ignoring the pod's allocation record", tc.why); len(got) != 1 {
				t.Errorf("want one logged error saying %q, got log:\n%s", tc.why, logs)
			}
		})
	}
}

// A bad update of a recorded pod is reported and leaves what the pod
// holds as it was.
func TestBadRecordUpdateKeepsBooking(t *testing.T) {
	c, logs := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384))
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 2048, 10)})
	c.SetPod(recordedPod(t, "p", a))
	c.SetPod(podWith("p", "n1", "not json"))
	if got, want := usage(t, c, "n1"), appUsage(1, a); !cmp.Equal(got, want) {
		t.Errorf("after a malformed update: %v, want the earlier booking %v", got, want)
	}
	if len(logs.matching("Ignoring the pod's allocation record")) != 1 {
		t.Errorf("malformed update not reported; log:\n%s", logs)
	}
}

func TestNodeError(t *testing.T) {
	withLabel := func(n *corev1.Node, value string) *corev1.Node {
		n.Labels[gpusharev1.NodeLabel] = value
		return n
	}
	dupUUID := inventory("n1", gpusharev1.ModeShared, 1024, 1024)
	dupUUID.GPUs[1].UUID = dupUUID.GPUs[0].UUID
	noAnnotation := gpuNode(t, "n1", 1024)
	delete(noAnnotation.Annotations, gpusharev1.InventoryAnnotation)
	noLabels := gpuNode(t, "n1", 1024)
	noLabels.Labels = nil

	tests := []struct {
		name string
		node *corev1.Node
		// The error must contain each of these.
		want []string
	}{
		{"no labels", noLabels, []string{"n1", "does not opt in", "gpushare=true"}},
		{"label false", withLabel(gpuNode(t, "n1", 1024), "false"), []string{"n1", "does not opt in", "gpushare=true"}},
		{"label True", withLabel(gpuNode(t, "n1", 1024), "True"), []string{"n1", "does not opt in"}},
		{"no inventory", noAnnotation, []string{"n1", "no GPU inventory", gpusharev1.InventoryAnnotation}},
		{"inventory not JSON", nodeWith("n1", "{gpus"), []string{"n1", gpusharev1.InventoryAnnotation, "invalid character"}},
		{"inventory of no GPUs", inventoryNode(t, "n1", inventory("n1", gpusharev1.ModeShared)), []string{"node n1", "gpus: Required value"}},
		{"duplicate UUID", inventoryNode(t, "n1", dupUUID), []string{"node n1", "gpus[1].uuid", "Duplicate value"}},
		{"wrong kind", nodeWith("n1", `{"apiVersion":"gpushare.io/v1alpha1","kind":"Allocation","gpus":[{"index":0,"uuid":"u","memoryMiB":1}]}`),
			[]string{"node n1", "kind"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newCache(t)
			c.SetNode(tc.node)
			err := c.NodeError("n1")
			if err == nil {
				t.Fatal("NodeError = nil, want why the node takes no part")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("NodeError %q does not say %q", err, s)
				}
			}
			if errors.Is(err, cache.ErrNodeGone) {
				t.Errorf("NodeError %q is ErrNodeGone, want the reason the node was rejected", err)
			}
			called := false
			if rerr := c.Read("n1", func(*alloc.NodeState) { called = true }); rerr == nil || rerr.Error() != err.Error() {
				t.Errorf("Read = %v, want the NodeError %v", rerr, err)
			}
			if called {
				t.Error("Read called its function for a rejected node")
			}
			if s := c.Snapshot(); len(s) != 0 {
				t.Errorf("Snapshot holds %d nodes, want none", len(s))
			}
			if aerr := c.Assume("p", "default/p", placement("n1", 0, 1, 1)); !errors.Is(aerr, cache.ErrNodeGone) {
				t.Errorf("Assume on a rejected node = %v, want %v", aerr, cache.ErrNodeGone)
			}

			// Fixed, the node joins and its error goes.
			c.SetNode(gpuNode(t, "n1", 1024))
			if err := c.NodeError("n1"); err != nil {
				t.Errorf("NodeError after the node was fixed = %v, want nil", err)
			}
		})
	}
}

func TestNodeErrorUnknownAndRemovedNode(t *testing.T) {
	c, _ := newCache(t)
	if err := c.NodeError("nowhere"); !errors.Is(err, cache.ErrNodeGone) || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("NodeError(nowhere) = %v, want ErrNodeGone naming the node", err)
	}
	c.SetNode(gpuNode(t, "n1", 1024))
	c.RemoveNode("n1")
	if err := c.NodeError("n1"); !errors.Is(err, cache.ErrNodeGone) {
		t.Errorf("NodeError after RemoveNode = %v, want ErrNodeGone", err)
	}
	// A removed node's rejection is forgotten too.
	bad := gpuNode(t, "n2", 1024)
	bad.Labels = nil
	c.SetNode(bad)
	c.RemoveNode("n2")
	if err := c.NodeError("n2"); !errors.Is(err, cache.ErrNodeGone) {
		t.Errorf("NodeError after RemoveNode of a rejected node = %v, want ErrNodeGone", err)
	}
}

// A node that leaves gpushare and comes back gets its pods' bookings back.
func TestNodeLeavesAndReturns(t *testing.T) {
	c, _ := newCache(t)
	node := gpuNode(t, "n1", 16384, 16384)
	c.SetNode(node)
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 1, 5000, 50)})
	c.SetPod(recordedPod(t, "p", a))

	off := node.DeepCopy()
	off.Labels[gpusharev1.NodeLabel] = "false"
	c.SetNode(off)
	if err := c.NodeError("n1"); err == nil || !strings.Contains(err.Error(), "does not opt in") {
		t.Fatalf("NodeError = %v, want the node to be out", err)
	}
	c.SetNode(node)
	if got, want := usage(t, c, "n1"), appUsage(2, a); !cmp.Equal(got, want) {
		t.Errorf("after the node returned: %v, want %v", got, want)
	}

	c.RemoveNode("n1")
	c.SetNode(node)
	if got, want := usage(t, c, "n1"), appUsage(2, a); !cmp.Equal(got, want) {
		t.Errorf("after the node was deleted and re-created: %v, want %v", got, want)
	}
}

// A changed inventory rebuilds the node with the bookings of its pods.
func TestInventoryUpdateKeepsBookings(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 5000, 50)})
	c.SetPod(recordedPod(t, "p", a))
	if err := c.Assume("q", "default/q", placement("n1", 1, 1000, 10)); err != nil {
		t.Fatal(err)
	}
	bigger := inventory("n1", gpusharev1.ModeShared, 32768, 32768)
	bigger.GPUs[1].Healthy = false
	c.SetNode(inventoryNode(t, "n1", bigger))
	want := []alloc.Usage{{MemoryMiB: 5000, Compute: 50}, {MemoryMiB: 1000, Compute: 10}}
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Errorf("after the inventory changed: %v, want %v", got, want)
	}
	s := c.Snapshot()[0]
	if s.Node.GPUs[0].MemoryMiB != 32768 || s.Node.GPUs[1].Healthy {
		t.Errorf("the node was not updated: %+v", s.Node.GPUs)
	}
}

func TestPodBeforeNode(t *testing.T) {
	c, _ := newCache(t)
	a := appRecord("n1",
		[]gpusharev1.GPUShare{share("n1", 0, 3000, 20), share("n1", 1, 3000, 20)},
		[]gpusharev1.GPUShare{share("n1", 1, 1000, 5)})
	c.SetPod(recordedPod(t, "p", a))
	if err := c.Read("n1", func(*alloc.NodeState) {}); !errors.Is(err, cache.ErrNodeGone) {
		t.Fatalf("Read before the node = %v, want ErrNodeGone", err)
	}
	if h, assumed := c.Holding("p"); h == nil || assumed || h.Node != "n1" {
		t.Fatalf("Holding = %+v, assumed %v; want the recorded placement kept for n1", h, assumed)
	}

	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	if got, want := usage(t, c, "n1"), appUsage(2, a); !cmp.Equal(got, want) {
		t.Errorf("after the node arrived: %v, want %v", got, want)
	}
	c.RemovePod("p")
	if got := usage(t, c, "n1"); !cmp.Equal(got, make([]alloc.Usage, 2)) {
		t.Errorf("after RemovePod: %v, want nothing", got)
	}
}

// A record seen before its node is placed on the node when it arrives
// as it is when the node comes first: the cache's state must not depend
// on which informer delivered first. A UUID the node does not list is a
// GPU that vanished: it keeps the booking, unhealthy, and the node's own
// GPUs stay free.
func TestPodBeforeNodeWithForeignUUID(t *testing.T) {
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 3000, 20)})
	a.Containers[0].GPUs[0].UUID = "GPU-replaced-0"
	pod := recordedPod(t, "p", a)

	nodeFirst, _ := newCache(t)
	nodeFirst.SetNode(gpuNode(t, "n1", 16384))
	nodeFirst.SetPod(pod)

	podFirst, _ := newCache(t)
	podFirst.SetPod(pod)
	podFirst.SetNode(gpuNode(t, "n1", 16384))

	want := nodeFirst.Snapshot()
	if diff := cmp.Diff(want, podFirst.Snapshot(), ignoreMemo); diff != "" {
		t.Fatalf("pod first differs from node first (-node first +pod first):\n%s", diff)
	}
	s := want[0]
	if len(s.Node.GPUs) != 2 || s.GPUs[0] != (alloc.Usage{}) {
		t.Fatalf("the node's own GPU is booked or no vanished GPU was added: %+v %v", s.Node.GPUs, s.GPUs)
	}
	if v := s.Node.GPUs[1]; v.UUID != "GPU-replaced-0" || v.Healthy || v.Model != cache.VanishedModel || s.GPUs[1] != (alloc.Usage{MemoryMiB: 3000, Compute: 20}) {
		t.Fatalf("vanished GPU %+v books %v, want GPU-replaced-0 unhealthy with 3000 MiB and 20%%", v, s.GPUs[1])
	}
	// Once the pod ends the vanished GPU goes.
	nodeFirst.RemovePod("p")
	if s := nodeFirst.Snapshot()[0]; len(s.Node.GPUs) != 1 {
		t.Fatalf("after the pod ended the node still has %d GPUs", len(s.Node.GPUs))
	}
}

// Bookings are held by GPU UUID: an inventory that renumbers the GPUs
// moves the bookings with them, one that loses a GPU keeps its bookings on
// it, unhealthy, and the other GPUs' bookings stay; an inventory with
// extra GPUs that a pod was bound to and that are then withdrawn frees
// none of the pod's real GPUs.
func TestBookingsHeldByUUID(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384, 16384))
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4000, 30), share("n1", 2, 4000, 30)})
	c.SetPod(recordedPod(t, "p", a))

	// The driver lost GPU 1 and renumbered GPU 2 as 1.
	lost := inventory("n1", gpusharev1.ModeShared, 16384, 16384)
	lost.GPUs[1].UUID = uuidOf("n1", 2)
	c.SetNode(inventoryNode(t, "n1", lost))
	want := []alloc.Usage{{MemoryMiB: 4000, Compute: 30}, {MemoryMiB: 4000, Compute: 30}}
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Fatalf("after a renumbering: %v, want %v", got, want)
	}

	// Now GPU 0 is gone too: its booking stays, on an unhealthy GPU.
	gone := inventory("n1", gpusharev1.ModeShared, 16384)
	gone.GPUs[0].UUID = uuidOf("n1", 2)
	c.SetNode(inventoryNode(t, "n1", gone))
	s := c.Snapshot()[0]
	if len(s.Node.GPUs) != 2 || s.Node.GPUs[1].UUID != uuidOf("n1", 0) || s.Node.GPUs[1].Healthy {
		t.Fatalf("the vanished GPU is not held: %+v", s.Node.GPUs)
	}
	if !cmp.Equal(s.GPUs, want) {
		t.Fatalf("after GPU 0 vanished: %v, want %v", s.GPUs, want)
	}
	// A new pod cannot land on the vanished GPU.
	if _, err := c.PlaceAndAssume("q", mustPlacer(t), "n1", sharedRequest("default/q", "c0", 13000)); err == nil {
		t.Error("a pod that fits only on the vanished GPU was placed")
	}
}

// A record on a pod whose spec asks for less than it books is reported
// once, and books what it names (fail closed: the pod runs with those
// GPUs); a later change of the record is refused, the booking kept.
func TestRecordMustConform(t *testing.T) {
	asks := func(*corev1.Pod) (*alloc.PodRequest, error) {
		return sharedRequest("default/p", "c0", 2048), nil
	}
	var refused []string
	r := &logRecorder{}
	c := cache.New(r.logger(), cache.Options{Requests: asks, Refused: func(p *corev1.Pod, err error) {
		refused = append(refused, p.Name+": "+err.Error())
	}})
	c.SetNode(gpuNode(t, "n1", 16384))
	greedy := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 16384, 0)})
	c.SetPod(recordedPod(t, "p", greedy))
	c.SetPod(recordedPod(t, "p", greedy))
	if got, want := usage(t, c, "n1"), appUsage(1, greedy); !cmp.Equal(got, want) {
		t.Fatalf("a record booking more than the pod asks booked %v, want what it names, %v", got, want)
	}
	if len(refused) != 1 || !strings.Contains(refused[0], "books 16384 MiB and 0% compute, the container asks for 2048 MiB") ||
		!strings.Contains(refused[0], "booked as it stands") {
		t.Fatalf("reports: %q, want one naming the numbers", refused)
	}
	honest := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 2048, 0)})
	c.SetPod(recordedPod(t, "p", honest))
	if got, want := usage(t, c, "n1"), appUsage(1, greedy); !cmp.Equal(got, want) {
		t.Fatalf("after the record changed it books %v, want the first record's %v", got, want)
	}
	if len(refused) != 2 || !strings.Contains(refused[1], "changed after the pod was bound") {
		t.Fatalf("reports: %q, want the change refused", refused)
	}
}

// Records that over-commit a GPU are all shown in the metrics: the booked
// memory exceeds the capacity instead of hiding the second record; the
// record that over-commits is reported once, naming its pod.
func TestOvercommitShown(t *testing.T) {
	var reported []string
	r := &logRecorder{}
	c := cache.New(r.logger(), cache.Options{Refused: func(p *corev1.Pod, err error) {
		if errors.Is(err, record.ErrOverCommitted) {
			reported = append(reported, p.Name)
		}
	}})
	c.SetNode(gpuNode(t, "n1", 15360))
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 15360, 0)})
	c.SetPod(recordedPod(t, "a", a))
	c.SetPod(recordedPod(t, "b", a))
	want := []metricGPU{{"n1", testModel, 0, 15360, alloc.Usage{MemoryMiB: 30720}, 0}}
	if err := testutil.CollectAndCompare(cache.NewCollector(c), strings.NewReader(expectedMetrics(0, want))); err != nil {
		t.Errorf("metrics hide the over-commit:\n%v", err)
	}
	if s := c.Snapshot()[0]; s.Node.GPUs[0].Healthy {
		t.Error("an over-committed GPU is still offered to new pods")
	}
	c.SetPod(recordedPod(t, "b", a))
	if len(reported) != 1 || reported[0] != "pod-b" {
		t.Errorf("reported over-commits of %q, want once pod-b's", reported)
	}
}

// Concurrent Assume calls for the same GPU never book more than it has.
func TestConcurrentAssumeNeverOvercommits(t *testing.T) {
	const (
		gpuMiB  = 16384
		podMiB  = 3000
		compute = 15
		pods    = 64
	)
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", gpuMiB))
	fit := min(gpuMiB/podMiB, 100/compute)

	var (
		wg             sync.WaitGroup
		mu             sync.Mutex
		ok, overcommit int
		other          []error
	)
	for i := range pods {
		wg.Go(func() {
			uid := types.UID(fmt.Sprintf("p%d", i))
			err := c.Assume(uid, "default/"+string(uid), placement("n1", 0, podMiB, compute))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, alloc.ErrOvercommit):
				overcommit++
			default:
				other = append(other, err)
			}
		})
		// Readers alongside the writers, for the race detector.
		wg.Go(func() { _ = c.Snapshot() })
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("unexpected errors: %v", other)
	}
	if ok != fit || overcommit != pods-fit {
		t.Errorf("%d assumptions succeeded and %d overcommitted, want %d and %d", ok, overcommit, fit, pods-fit)
	}
	want := []alloc.Usage{{MemoryMiB: int64(ok) * podMiB, Compute: int64(ok) * compute}}
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Errorf("booked %v, want %v for %d pods", got, want, ok)
	}
}

// Concurrent PlaceAndAssume calls never book a GPU beyond its capacity,
// and fill the node exactly.
func TestConcurrentPlaceAndAssumeNeverOvercommits(t *testing.T) {
	const (
		gpus    = 3
		gpuMiB  = 16384
		podMiB  = 3000
		compute = 25
		pods    = 48
	)
	placer, err := alloc.NewPlacer(alloc.Config{Node: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newCache(t)
	mibs := make([]int64, gpus)
	for i := range mibs {
		mibs[i] = gpuMiB
	}
	c.SetNode(gpuNode(t, "n1", mibs...))
	perGPU := min(gpuMiB/podMiB, 100/compute)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		placed  = map[types.UID]*alloc.Placement{}
		unfit   int
		failure []error
	)
	for i := range pods {
		wg.Go(func() {
			uid := types.UID(fmt.Sprintf("p%d", i))
			req := &alloc.PodRequest{Key: "default/" + string(uid), Containers: []alloc.PodContainer{{
				ContainerRequest: alloc.ContainerRequest{Name: "c", MemoryMiB: podMiB, Compute: compute}}}}
			p, err := c.PlaceAndAssume(uid, placer, "n1", req)
			mu.Lock()
			defer mu.Unlock()
			var u *alloc.Unfit
			switch {
			case err == nil:
				placed[uid] = p
			case errors.As(err, &u):
				unfit++
			default:
				failure = append(failure, err)
			}
		})
		wg.Go(func() {
			_ = c.Read("n1", func(s *alloc.NodeState) { _ = s.FreeShare(0) })
		})
	}
	wg.Wait()
	if len(failure) > 0 {
		t.Fatalf("unexpected errors: %v", failure)
	}
	if want := gpus * perGPU; len(placed) != want || unfit != pods-want {
		t.Errorf("%d pods placed and %d unfit, want %d and %d", len(placed), unfit, want, pods-want)
	}
	// What the cache books is exactly the sum of the placements, within
	// every GPU's capacity.
	want := make([]alloc.Usage, gpus)
	for uid, p := range placed {
		if h, assumed := c.Holding(uid); h != p || !assumed {
			t.Errorf("Holding(%s) = %p, assumed %v; want the returned placement %p", uid, h, assumed, p)
		}
		for _, b := range p.Booked {
			want[b.GPU].MemoryMiB += b.MemoryMiB
			want[b.GPU].Compute += b.Compute
		}
	}
	got := usage(t, c, "n1")
	if !cmp.Equal(got, want) {
		t.Errorf("booked %v, want the sum of the placements %v", got, want)
	}
	for i, u := range got {
		if u.MemoryMiB > gpuMiB || u.Compute > 100 {
			t.Errorf("GPU %d overcommitted: %+v", i, u)
		}
	}
}

// PlaceAndAssume for a pod already assumed on the node rates the node
// without the pod's old booking, and replaces it.
func TestPlaceAndAssumeReplacesOwnBooking(t *testing.T) {
	placer, err := alloc.NewPlacer(alloc.Config{Node: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384))
	req := &alloc.PodRequest{Key: "default/p", Containers: []alloc.PodContainer{{
		ContainerRequest: alloc.ContainerRequest{Name: "c", MemoryMiB: 10000, Compute: 60}}}}
	if _, err := c.PlaceAndAssume("p", placer, "n1", req); err != nil {
		t.Fatal(err)
	}
	// A second copy would not fit beside the first; a replacement does.
	if _, err := c.PlaceAndAssume("p", placer, "n1", req); err != nil {
		t.Fatalf("re-placing the same pod: %v", err)
	}
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 10000, Compute: 60}}; !cmp.Equal(got, want) {
		t.Errorf("booked %v, want %v", got, want)
	}
	if _, err := c.PlaceAndAssume("q", placer, "n1", req); err == nil {
		t.Error("another pod of the same size fit beside it")
	}
	if _, err := c.PlaceAndAssume("q", placer, "n9", req); !errors.Is(err, cache.ErrNodeGone) {
		t.Errorf("PlaceAndAssume on an unknown node = %v, want ErrNodeGone", err)
	}
}

// LargestGPU follows nodes coming, changing and going.
func TestLargestGPU(t *testing.T) {
	c, _ := newCache(t)
	if got := c.LargestGPU(); got != 0 {
		t.Fatalf("empty cache: %d", got)
	}
	c.SetNode(gpuNode(t, "small", 16384, 16384))
	c.SetNode(gpuNode(t, "big", 81920))
	if got := c.LargestGPU(); got != 81920 {
		t.Fatalf("largest %d, want 81920", got)
	}
	c.SetNode(gpuNode(t, "big", 24576))
	if got := c.LargestGPU(); got != 24576 {
		t.Fatalf("after the big node shrank: %d, want 24576", got)
	}
	c.RemoveNode("big")
	if got := c.LargestGPU(); got != 16384 {
		t.Fatalf("after the big node left: %d, want 16384", got)
	}
}

// ReadEach hands over each known node's state and, for the others, the
// error Read would give.
func TestReadEach(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384))
	c.SetNode(gpuNode(t, "n2", 16384, 32768))
	gpus := map[string]int{}
	var missing error
	c.ReadEach([]string{"n2", "gone", "n1"}, func(name string, s *alloc.NodeState, sum *alloc.Summary, err error) {
		if err != nil {
			missing = err
			return
		}
		gpus[name] = len(s.GPUs)
		if *sum != s.Summarize() {
			t.Errorf("%s: the Summary is not its state's", name)
		}
	})
	if want := map[string]int{"n1": 1, "n2": 2}; !cmp.Equal(gpus, want) {
		t.Errorf("GPUs per node = %v, want %v", gpus, want)
	}
	if !errors.Is(missing, cache.ErrNodeGone) {
		t.Errorf("unknown node: %v, want ErrNodeGone", missing)
	}
}

// TestReadEachOrders: ReadEach hands over what Read does for each name,
// whether the names come in the order of earlier calls (which it follows
// without the map) or not, after nodes change inventory, leave and come
// back, and with calls running at once. The names come in runs of one
// kind: short; longer than an entry holds in itself (46 bytes); or 45, 46
// and 47 bytes sharing a 42-byte prefix. Skipping a node in the order
// thus puts a name beside an entry whose name differs from it only at its
// end, or only in length.
func TestReadEachOrders(t *testing.T) {
	c, _ := newCache(t)
	const nodes = 40
	order := make([]string, nodes)
	gpus := make([]int, nodes)
	set := func(i int) {
		mib := make([]int64, gpus[i])
		for g := range mib {
			mib[g] = 16384
		}
		c.SetNode(gpuNode(t, order[i], mib...))
	}
	long, edge := strings.Repeat("l", 60), strings.Repeat("e", 42)
	for i := range order {
		switch i / 4 % 3 {
		case 0:
			order[i] = fmt.Sprintf("node-%02d", i)
		case 1:
			order[i] = fmt.Sprintf("%s-%02d", long, i)
		default:
			order[i] = fmt.Sprintf("%s%s-%02d", edge, strings.Repeat("x", i%3), i)
		}
		gpus[i] = 1
		set(i)
	}
	for _, name := range order {
		want := len(name)
		if want > 46 {
			want = 0
		}
		if got, ok := c.InlineName(name); !ok || got != want {
			t.Fatalf("%s (%d bytes): the entry holds %d bytes of its name (found %v), want %d", name, len(name), got, ok, want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	// check reads names twice at once and compares each answer with Read's.
	check := func(step int, names []string) {
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				type answer struct {
					name  string
					state *alloc.NodeState
					err   error
				}
				var got []answer
				c.ReadEach(names, func(name string, s *alloc.NodeState, _ *alloc.Summary, err error) {
					got = append(got, answer{name, s, err})
				})
				if len(got) != len(names) {
					t.Errorf("step %d: %d answers for %d names", step, len(got), len(names))
				}
				for i, a := range got {
					var want *alloc.NodeState
					wantErr := c.Read(a.name, func(s *alloc.NodeState) { want = s })
					if a.name != names[i] || a.state != want || (a.err == nil) != (wantErr == nil) {
						t.Errorf("step %d, %s: ReadEach gave %s %p (%v), Read %p (%v)", step, names[i], a.name, a.state, a.err, want, wantErr)
					}
				}
			})
		}
		wg.Wait()
	}
	next := 0
	for step := range 300 {
		var names []string
		switch rng.IntN(4) {
		case 0:
			// Shuffled, with a name of no node among them.
			names = slices.Clone(order[:10+rng.IntN(20)])
			rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
			names = append(names, "node-99", long+"-99", edge+"-99", edge+"x-99", edge+"xx-99")
		default:
			// A window of the order, going round, less a node or two.
			for k := range 12 {
				if rng.IntN(8) > 0 {
					names = append(names, order[(next+k)%nodes])
				}
			}
			next = (next + 12) % nodes
		}
		check(step, names)
		switch i := rng.IntN(nodes); rng.IntN(6) {
		case 0:
			// A new inventory: a new entry under the same name.
			gpus[i] = 1 + gpus[i]%3
			set(i)
		case 1:
			c.RemoveNode(order[i])
			check(step, names)
			set(i)
		}
	}
}

// TestSupply: the cache counts the healthy GPUs of each kind over its
// nodes, as nodes come, change and go, and moves the generation when it
// does; and the free share the bookings leave of them, without moving
// the generation.
func TestSupply(t *testing.T) {
	c, _ := newCache(t)
	if s, _ := c.Supply(); len(s) != 0 {
		t.Fatalf("empty cache: supply %v, want none", s)
	}
	c.SetNode(gpuNode(t, "n1", 40960, 40960, 20480))
	c.SetNode(gpuNode(t, "n2", 40960))
	// The nodes report no allocatable CPU: record.Unlimited each, shared
	// among its healthy GPUs.
	third := int64(record.Unlimited / 3)
	want := []alloc.Supply{{Model: testModel, MemoryMiB: 20480, GPUs: 1, Free: 1000, CPUMilli: third},
		{Model: testModel, MemoryMiB: 40960, GPUs: 3, Free: 3000, CPUMilli: 2*third + record.Unlimited}}
	s, gen := c.Supply()
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("supply (-want +got):\n%s", diff)
	}
	if gen != c.SupplyGeneration() || gen == 0 {
		t.Errorf("generation %d, SupplyGeneration %d: want equal and moved", gen, c.SupplyGeneration())
	}

	inv := inventory("n1", gpusharev1.ModeShared, 40960, 40960, 20480)
	inv.GPUs[0].Healthy = false
	c.SetNode(inventoryNode(t, "n1", inv))
	c.RemoveNode("n2")
	want = []alloc.Supply{{Model: testModel, MemoryMiB: 20480, GPUs: 1, Free: 1000, CPUMilli: record.Unlimited / 2},
		{Model: testModel, MemoryMiB: 40960, GPUs: 1, Free: 1000, CPUMilli: record.Unlimited / 2}}
	s, next := c.Supply()
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("after a GPU fails and n2 goes (-want +got):\n%s", diff)
	}
	if next == gen {
		t.Error("supply changed, generation did not")
	}

	// Half of n1's healthy 40960 MiB GPU's compute booked: half of it
	// is free; the GPUs did not change, nor does the generation.
	c.SetPod(recordedPod(t, "p", appRecord("n1", []gpusharev1.GPUShare{share("n1", 1, 5000, 50)})))
	want[1].Free = 500
	s, booked := c.Supply()
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("after a booking (-want +got):\n%s", diff)
	}
	if booked != next {
		t.Error("a booking moved the generation")
	}
}

// ReadNode finds a node by the object the cache last saw, and by name
// from any other object of it (a snapshot taken before an update); it
// holds no object past its update.
func TestReadNode(t *testing.T) {
	c, _ := newCache(t)
	readNode := func(n *corev1.Node) ([]alloc.Usage, error) {
		var got []alloc.Usage
		err := c.ReadNode(n, func(s *alloc.NodeState, sum *alloc.Summary) {
			got = slices.Clone(s.GPUs)
			if *sum != s.Summarize() {
				t.Errorf("%s: the Summary is not its state's", s.Node.Name)
			}
		})
		return got, err
	}
	v1 := gpuNode(t, "n1", 16384, 16384)
	c.SetNode(v1)
	c.SetNode(gpuNode(t, "n2", 16384))
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 1, 5000, 50)})
	c.SetPod(recordedPod(t, "p", a))
	want := appUsage(2, a)
	if got, err := readNode(v1); err != nil || !cmp.Equal(got, want) {
		t.Fatalf("ReadNode(the object set) = %v, %v; want %v", got, err, want)
	}

	// An update with the same inventory keeps the entry.
	v2 := v1.DeepCopy()
	v2.Labels["zone"] = "b"
	for range 100 {
		v2 = v2.DeepCopy()
		c.SetNode(v2)
	}
	for _, n := range []*corev1.Node{v2, v1} {
		if got, err := readNode(n); err != nil || !cmp.Equal(got, want) {
			t.Errorf("after updates, ReadNode(%p) = %v, %v; want %v", n, got, err, want)
		}
	}
	if got := c.Objects(); got != 2 {
		t.Errorf("the cache finds nodes by %d objects after 100 updates of one of 2 nodes, want 2", got)
	}

	// A new inventory makes a new entry: the old object finds it too.
	v3 := inventoryNode(t, "n1", inventory("n1", gpusharev1.ModeShared, 16384, 16384, 16384))
	c.SetNode(v3)
	want = appUsage(3, a)
	for _, n := range []*corev1.Node{v3, v2} {
		if got, err := readNode(n); err != nil || !cmp.Equal(got, want) {
			t.Errorf("after a new inventory, ReadNode(%p) = %v, %v; want %v", n, got, err, want)
		}
	}

	// A node that leaves, or is deleted, is found by no object.
	off := v3.DeepCopy()
	off.Labels[gpusharev1.NodeLabel] = "false"
	c.SetNode(off)
	for _, n := range []*corev1.Node{off, v3} {
		if _, err := readNode(n); err == nil || !strings.Contains(err.Error(), "does not opt in") {
			t.Errorf("ReadNode of a node that left = %v, want why", err)
		}
	}
	c.SetNode(v3)
	c.RemoveNode("n1")
	if _, err := readNode(v3); !errors.Is(err, cache.ErrNodeGone) {
		t.Errorf("ReadNode of a deleted node = %v, want ErrNodeGone", err)
	}
	if got := c.Objects(); got != 1 {
		t.Errorf("the cache finds nodes by %d objects with one node left, want 1", got)
	}
}

// An update that leaves the inventory's text as it was still takes a
// new allocatable CPU or memory, and a node that stops opting in leaves.
func TestNodeUpdateSameInventory(t *testing.T) {
	c, _ := newCache(t)
	n := gpuNode(t, "n1", 16384)
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi")}
	c.SetNode(n)
	for _, want := range []struct {
		cpu, memory string
		cpuMilli    int64
		memoryMiB   int64
	}{{"8", "32Gi", 8000, 32768}, {"4", "32Gi", 4000, 32768}, {"4", "16Gi", 4000, 16384}} {
		n = n.DeepCopy()
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(want.cpu), corev1.ResourceMemory: resource.MustParse(want.memory)}
		c.SetNode(n)
		if got := c.Snapshot()[0].Node; got.CPUMilli != want.cpuMilli || got.MemoryMiB != want.memoryMiB {
			t.Errorf("allocatable %s CPU, %s memory: the cache has %d mCPU, %d MiB", want.cpu, want.memory, got.CPUMilli, got.MemoryMiB)
		}
	}
	off := n.DeepCopy()
	off.Labels[gpusharev1.NodeLabel] = "false"
	c.SetNode(off)
	if err := c.NodeError("n1"); err == nil {
		t.Error("a node whose label no longer opts in, its inventory unchanged, is still in the cache")
	}
}

// BenchmarkSetNodeUnchanged is an update of a node of 8 GPUs that leaves
// its inventory as it was: what each status or taint update of a Node
// costs the scheduler.
func BenchmarkSetNodeUnchanged(b *testing.B) {
	c := cache.New(klog.Background(), cache.Options{})
	inv := inventory("n1", gpusharev1.ModeShared, 81920, 81920, 81920, 81920, 81920, 81920, 81920, 81920)
	value, err := gpusharev1.Marshal(inv)
	if err != nil {
		b.Fatal(err)
	}
	n := nodeWith("n1", value)
	c.SetNode(n)
	updates := make([]*corev1.Node, 64)
	for i := range updates {
		updates[i] = n.DeepCopy()
		// A decoded object's text is its own, as the informer's is.
		updates[i].Annotations[gpusharev1.InventoryAnnotation] = strings.Clone(value)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.SetNode(updates[i%len(updates)])
	}
}

// A booked pod's status updates (a real node's kubelet sends several)
// leave the cache holding the latest object only, as the informer does:
// not a second copy of every pod.
func TestPodUpdateReleasesOlderObject(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384))
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 5000, 50)})
	v1 := recordedPod(t, "p", a)
	c.SetPod(v1)
	v2 := v1.DeepCopy()
	v2.Status.Phase = corev1.PodRunning
	older := weak.Make(v1)
	v1 = nil //nolint:ineffassign,wastedassign // drops the test's own reference
	c.SetPod(v2)
	runtime.GC()
	if older.Value() != nil {
		t.Error("the cache still holds a pod's object after the pod's update")
	}
	if got, want := usage(t, c, "n1"), appUsage(1, a); !cmp.Equal(got, want) {
		t.Errorf("after the update: %v, want %v", got, want)
	}
	runtime.KeepAlive(v2)
}
