package defrag

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/decision"
	"github.com/gpushare/gpushare/pkg/resource"
)

// moverFixture is a mover over nodes n1 and n2 (one 16 GiB GPU each): x
// (8 GiB on n1, a ReplicaSet's, in a namespace that opts in) may move, y
// (6 GiB on n2) may not, and w waits for a whole GPU.
type moverFixture struct {
	m      *Mover
	req    *alloc.PodRequest
	placer *alloc.Placer
	nodes  cache.Indexer
	w, x   *corev1.Pod
	events chan string
	clock  time.Time

	mu        sync.Mutex
	refuse    bool
	evicted   []string
	activated []string
}

func newMoverFixture(t *testing.T) *moverFixture {
	t.Helper()
	logger := klog.Background()
	model, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	args, err := v1alpha1.LoadArgs([]byte("nodePolicy: binpack\ndefrag: {enabled: true}"))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := decision.Policy(args, model)
	if err != nil {
		t.Fatal(err)
	}
	c := gpucache.New(logger, gpucache.Options{})
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range []string{"n1", "n2"} {
		inv := &gpusharev1.GPUInventory{Mode: gpusharev1.ModeShared, GPUs: []gpusharev1.GPU{{Index: 0, UUID: "GPU-" + n + "-0",
			Model: "Tesla T4", MemoryMiB: 16384, Healthy: true, NUMANode: -1}}}
		value, err := gpusharev1.Marshal(inv)
		if err != nil {
			t.Fatal(err)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{gpusharev1.NodeLabel: "true", "name": n},
			Annotations: map[string]string{gpusharev1.InventoryAnnotation: value}}}
		c.SetNode(node)
		if err := nodes.Add(node); err != nil {
			t.Fatal(err)
		}
	}
	running := func(name, node string, mib int64) *corev1.Pod {
		p := memPod(name, mib)
		p.Spec.NodeName = node
		p.Status.Phase = corev1.PodRunning
		value, err := gpusharev1.Marshal(&gpusharev1.Allocation{Node: node, Containers: []gpusharev1.ContainerAllocation{{
			Name: "main", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{{Index: 0, UUID: "GPU-" + node + "-0", MemoryMiB: mib}}}}})
		if err != nil {
			t.Fatal(err)
		}
		p.Annotations = map[string]string{gpusharev1.AllocationAnnotation: value}
		c.SetPod(p)
		return p
	}
	x := running("x", "n1", 8192)
	x.Namespace = "web"
	x.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "x-rs", UID: "rs-x", Controller: new(true)}}
	y := running("y", "n2", 6144)
	w := memPod("w", 0)
	w.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-count": k8sresource.MustParse("1")}

	f := &moverFixture{x: x, w: w, nodes: nodes, events: make(chan string, 20), clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset()
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.refuse {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		f.evicted = append(f.evicted, a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName())
		return true, nil, nil
	})
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	// x's replacement, made by its ReplicaSet, waiting to be placed.
	x2 := memPod("x-2", 8192)
	x2.Namespace, x2.OwnerReferences = "web", x.OwnerReferences
	for _, p := range []*corev1.Pod{x, y, w, x2} {
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	namespaces := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := namespaces.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{OptIn: "true"}}}); err != nil {
		t.Fatal(err)
	}
	f.m = NewMover(Config{Args: *args.Defrag, Client: client, Recorder: &chanRecorder{out: f.events}, Cache: c, Model: model,
		Pods: corelisters.NewPodLister(pods), Nodes: corelisters.NewNodeLister(nodes), Namespaces: corelisters.NewNamespaceLister(namespaces),
		PDBs: policylisters.NewPodDisruptionBudgetLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})),
		Now:  func() time.Time { return f.clock },
		Activate: func(pods map[string]*corev1.Pod) {
			f.mu.Lock()
			defer f.mu.Unlock()
			for k := range pods {
				f.activated = append(f.activated, k)
			}
		}})
	req, err := decision.Request(model, w)
	if err != nil {
		t.Fatal(err)
	}
	f.req, f.placer = req, policy.Placer()
	return f
}

func memPod(name string, mib int64) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	if mib > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(mib, k8sresource.DecimalSI)}
	}
	return p
}

// chanRecorder sends each event's reason and note to out.
type chanRecorder struct{ out chan string }

func (r *chanRecorder) Eventf(regarding, _ runtime.Object, _, reason, _, note string, args ...any) {
	name := ""
	if o, ok := regarding.(metav1.Object); ok {
		name = o.GetName()
	}
	r.out <- fmt.Sprintf("%s %s: %s", name, reason, fmt.Sprintf(note, args...))
}

var _ events.EventRecorder = (*chanRecorder)(nil)

// next waits for the next event and checks it starts with want.
func (f *moverFixture) next(t *testing.T, want string) {
	t.Helper()
	select {
	case e := <-f.events:
		if !strings.HasPrefix(e, want) {
			t.Errorf("event %q, want %q...", e, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no event; want %q", want)
	}
}

// TestMoverHonoursPlacementRules: the mover makes room only on a node
// the waiting pod may run on, and moves a pod only to a node it may run
// on: by node selector, required affinity and taints.
func TestMoverHonoursPlacementRules(t *testing.T) {
	ctx := t.Context()
	for name, c := range map[string]struct {
		edit func(f *moverFixture)
		want string
	}{
		"waiting pod selects no node": {func(f *moverFixture) { f.w.Spec.NodeSelector = map[string]string{"name": "n9"} },
			"defragmentation: no plan"},
		"waiting pod does not tolerate n1": {func(f *moverFixture) {
			n1, _, _ := f.nodes.GetByKey("n1")
			n := n1.(*corev1.Node).DeepCopy()
			n.Spec.Taints = []corev1.Taint{{Key: "team", Value: "a", Effect: corev1.TaintEffectNoSchedule}}
			if err := f.nodes.Update(n); err != nil {
				t.Fatal(err)
			}
		}, "defragmentation: no plan"},
		"moved pod may run on n1 only": {func(f *moverFixture) {
			f.x.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}}}}}
		}, "defragmentation: no plan"},
		"as they are": {func(*moverFixture) {}, "defragmentation: moving web/x to node n2 (GPU 0)"},
	} {
		f := newMoverFixture(t)
		c.edit(f)
		if note := f.m.Consider(ctx, f.w, f.req, f.placer); !strings.HasPrefix(note, c.want) {
			t.Errorf("%s: %q, want %q...", name, note, c.want)
		}
		if c.want == "defragmentation: no plan" {
			f.mu.Lock()
			if len(f.evicted) > 0 {
				t.Errorf("%s: evicted %v", name, f.evicted)
			}
			f.mu.Unlock()
		}
	}
}

// TestMoverGivesUp: a plan whose eviction is refused releases what it
// held at once; a plan whose replacement does not come releases it at
// the deadline; each says why on the waiting pod, and the cluster is as
// before the plan.
func TestMoverGivesUp(t *testing.T) {
	f := newMoverFixture(t)
	ctx := t.Context()
	f.refuse = true
	before := f.m.cfg.Cache.Snapshot()

	if note := f.m.Consider(ctx, f.w, f.req, f.placer); note != "defragmentation: moving web/x to node n2 (GPU 0)" {
		t.Fatalf("consider: %q", note)
	}
	f.next(t, "w Defragmenting: Moving 1 pod(s) to make room on node n1 (GPU 0): web/x to node n2 (GPU 0)")
	f.next(t, "w DefragFailed: Gave up making room on node n1: the eviction of web/x was refused (Cannot evict pod")
	if left := f.m.cfg.Cache.PlanHolds("defrag/uid-w"); len(left) != 0 {
		t.Errorf("holds after the refusal: %v", left)
	}
	// The room released, the waiting pod and the moved pod's
	// replacement are tried again at once.
	f.mu.Lock()
	slices.Sort(f.activated)
	if !slices.Equal(f.activated, []string{"default/w", "web/x-2"}) {
		t.Errorf("activated %v after the release; want the waiting pod and the replacement, [default/w web/x-2]", f.activated)
	}
	f.mu.Unlock()
	if after := f.m.cfg.Cache.Snapshot(); !sameUsage(before, after) {
		t.Errorf("the cache after the refusal differs from before the plan")
	}
	// Tried in vain just now: no new plan until retryAfter passes.
	if note := f.m.Consider(ctx, f.w, f.req, f.placer); note != "" {
		t.Errorf("consider right after: %q, want nothing", note)
	}

	f.mu.Lock()
	f.refuse = false
	f.mu.Unlock()
	f.clock = f.clock.Add(retryAfter)
	if note := f.m.Consider(ctx, f.w, f.req, f.placer); !strings.HasPrefix(note, "defragmentation: moving web/x") {
		t.Fatalf("consider after retryAfter: %q", note)
	}
	f.next(t, "w Defragmenting:")
	f.next(t, "x MovedByDefrag: Evicted to make room for default/w on node n1; its replacement has room held on node n2 (GPU 0)")
	if note := f.m.Consider(ctx, f.w, f.req, f.placer); note != "defragmentation: waiting for 1 moved pod(s) to leave node n1" {
		t.Errorf("consider while the plan is under way: %q", note)
	}
	f.m.Follow()
	if got := f.m.cfg.Cache.PlanHolds("defrag/uid-w"); !slices.Equal(got, []string{"defrag/uid-w/move-0", "defrag/uid-w/target"}) {
		t.Fatalf("holds before the deadline: %v", got)
	}
	f.clock = f.clock.Add(f.m.cfg.Args.Timeout.Duration + time.Second)
	f.m.Follow()
	f.next(t, "w DefragFailed: Gave up making room on node n1: 2m0s passed waiting for the replacement of web/x, the pod itself; released 2 held place(s)")
	if after := f.m.cfg.Cache.Snapshot(); !sameUsage(before, after) {
		t.Errorf("the cache after the timeout differs from before the plan")
	}
}

// TestMoverDone: x ends, the waiting pod and x's replacement take their
// holds, and the plan is done.
func TestMoverDone(t *testing.T) {
	f := newMoverFixture(t)
	ctx := t.Context()
	if note := f.m.Consider(ctx, f.w, f.req, f.placer); !strings.HasPrefix(note, "defragmentation: moving web/x") {
		t.Fatalf("consider: %q", note)
	}
	f.next(t, "w Defragmenting:")
	f.next(t, "x MovedByDefrag:")
	f.m.cfg.Cache.RemovePod(f.x.UID)
	held := f.m.cfg.Cache.HeldFor(f.w.UID, "", "default")
	if len(held) != 1 || held[0].Node != "n1" || held[0].Placement.BookedMiB() != 16384 {
		t.Fatalf("w's hold after x ended: %+v", held)
	}
	if _, _, err := f.m.cfg.Cache.PlaceAndAssumeHeld(f.w.UID, f.placer, "n1", f.req, []string{held[0].Key}); err != nil {
		t.Fatal(err)
	}
	f.m.Follow()
	select {
	case e := <-f.events:
		t.Fatalf("event before the replacement came: %s", e)
	default:
	}
	repl := memPod("x2", 8192)
	req, err := decision.Request(f.m.cfg.Model, repl)
	if err != nil {
		t.Fatal(err)
	}
	if other := f.m.cfg.Cache.HeldFor(repl.UID, "rs-x", "default"); other != nil {
		t.Errorf("a pod of another namespace naming x's controller may take %+v", other)
	}
	repl.Namespace = "web"
	held = f.m.cfg.Cache.HeldFor(repl.UID, "rs-x", "web")
	if len(held) != 1 || held[0].Node != "n2" {
		t.Fatalf("the replacement's hold: %+v", held)
	}
	if _, _, err := f.m.cfg.Cache.PlaceAndAssumeHeld(repl.UID, f.placer, "n2", req, []string{held[0].Key}); err != nil {
		t.Fatal(err)
	}
	f.m.Follow()
	f.next(t, "w Defragmented: Placed on node n1 (GPU 0) after moving 1 pod(s)")
	if f.m.plans[f.w.UID] != nil {
		t.Error("the plan is still under way")
	}
}

func sameUsage(a, b []*alloc.NodeState) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !slices.Equal(a[i].GPUs, b[i].GPUs) {
			return false
		}
	}
	return true
}

// TestMoverLooksOncePerShape: when the search finds no plan, another pod
// of the same request does not search again for shapeRetryAfter; a pod
// refused before any search (no pod may move) does not hold others back.
func TestMoverLooksOncePerShape(t *testing.T) {
	f := newMoverFixture(t)
	ctx := t.Context()
	// n2 full but for 4 GiB: x has nowhere to go.
	z := memPod("z", 6144)
	z.Spec.NodeName, z.Status.Phase = "n2", corev1.PodRunning
	value, err := gpusharev1.Marshal(&gpusharev1.Allocation{Node: "n2", Containers: []gpusharev1.ContainerAllocation{{
		Name: "main", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{{Index: 0, UUID: "GPU-n2-0", MemoryMiB: 6144}}}}})
	if err != nil {
		t.Fatal(err)
	}
	z.Annotations = map[string]string{gpusharev1.AllocationAnnotation: value}
	f.m.cfg.Cache.SetPod(z)
	if note := f.m.Consider(ctx, f.w, f.req, f.placer); note != "defragmentation: no plan of at most 3 moves among the 1 pods that may move" {
		t.Fatalf("consider: %q", note)
	}
	w2 := f.w.DeepCopy()
	w2.Name, w2.UID = "w2", "uid-w2"
	if note := f.m.Consider(ctx, w2, f.req, f.placer); note != "" {
		t.Errorf("another pod of the shape right after: %q, want no search", note)
	}
	f.clock = f.clock.Add(shapeRetryAfter)
	if note := f.m.Consider(ctx, w2, f.req, f.placer); !strings.HasPrefix(note, "defragmentation: no plan") {
		t.Errorf("after shapeRetryAfter: %q, want a search", note)
	}

	// No pod may move: the next pod of the shape still looks.
	g := newMoverFixture(t)
	delete(g.x.Labels, OptIn)
	g.m.cfg.Namespaces = corelisters.NewNamespaceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	if note := g.m.Consider(ctx, g.w, g.req, g.placer); !strings.HasPrefix(note, "defragmentation: no pod may move (") {
		t.Fatalf("consider without opt-in: %q", note)
	}
	if note := g.m.Consider(ctx, w2, g.req, g.placer); !strings.HasPrefix(note, "defragmentation: no pod may move (") {
		t.Errorf("the next pod of the shape: %q, want it to look", note)
	}
}
