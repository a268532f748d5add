package holder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/podresources"
)

const memResource = "gpushare.io/gpu-mem"

// resolveNode is a node whose pods of 100 MiB are admitted by name.
type resolveNode struct {
	*node
	t testing.TB
}

func (n resolveNode) pod(name string) *corev1Pod {
	return n.node.pod(name, len(name)%2, 100)
}

func (n resolveNode) admit(names ...string) {
	n.t.Helper()
	for _, name := range names {
		if err := n.node.admit(n.pod(name)); err != nil {
			n.t.Fatalf("admitting %s: %v", name, err)
		}
	}
}

// ids are the device IDs the kubelet gave the pod's container.
func (n resolveNode) ids(pod string) []string {
	return n.deviceIDs(pod, "main", memResource)
}

// numbered returns count pod names: prefix00, prefix01, ...
func numbered(prefix string, count int) []string {
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return names
}

// calls returns how many List and Get calls the kubelet served.
func (n resolveNode) calls() (lists, gets int) {
	c := n.PodResourcesCalls()
	return c["List"], c["Get"]
}

// quiet waits until the prefetches have ended, none due (and with them
// their calls to the kubelet), and returns how many List and Get calls
// the kubelet served.
func (n resolveNode) quiet() (lists, gets int) {
	n.t.Helper()
	if !n.c.waitFor(n.c.settled) {
		n.t.Fatal("the prefetches did not end within 10 s")
	}
	return n.calls()
}

// settled reports whether no prefetch is due or running (c.mu held).
func (c *Resolver) settled() bool { return !c.due && !c.fetching && !c.fetchAgain }

// waitFor waits until cond, checked under c.mu, holds, up to 10 s, and
// reports whether it does: woken by each change of the prefetch's state,
// not by polling.
func (c *Resolver) waitFor(cond func() bool) bool {
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		ok, changed := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-deadline:
			return false
		}
	}
}

// A container whose pod the latest listing does not show is found by
// asking the kubelet about each pod that listing does not show (Get), not
// by listing the node again; past maxGets such pods, ask gives up, asking
// nothing, and the node is listed.
func TestAskPods(t *testing.T) {
	sk := &staleKubelet{}
	n := resolveNode{startNodeWith(t, func(c *Config) {
		sk.Kubelet = c.Kubelet
		c.Kubelet = sk
	}), t}
	// No prefetch: this test takes the listings.
	n.c.mu.Lock()
	n.c.after = time.Hour
	n.c.mu.Unlock()
	ctx := context.Background()
	list := func() *podresources.Listing {
		t.Helper()
		l, err := n.client.List(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	n.admit("a", "b")
	old := list()
	// stale makes the latest listing one that shows only a and b.
	stale := func() { sk.set(old, time.Now()) }

	n.admit("c", "d")
	list()
	stale()
	lists, gets := n.calls()
	h, ok := n.c.ask(ctx, memResource, n.ids("d"), time.Now())
	if want := (podresources.Holder{Namespace: "default", Pod: "d", Container: "main"}); !ok || h != want {
		t.Errorf("ask for d's devices = %+v, %v; want %+v", h, ok, want)
	}
	if l, g := n.calls(); l != lists || g != gets+2 {
		t.Errorf("ask made %d List and %d Get calls; want 0 and 2 (c and d)", l-lists, g-gets)
	}

	// d's container starts with what that Get showed.
	lists, gets = n.calls()
	env, err := n.start(n.pod("d"), "main")
	if err != nil || env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(1) {
		t.Errorf("starting d: %v, %v", env, err)
	}
	if l, g := n.calls(); l != lists || g != gets {
		t.Errorf("starting d made %d List and %d Get calls; want none", l-lists, g-gets)
	}

	// c and d are shown by Gets: more than maxGets others are not.
	more := numbered("e", maxGets+1)
	n.admit(more...)
	stale()
	lists, gets = n.calls()
	if h, ok := n.c.ask(ctx, memResource, n.ids("e00"), time.Now()); ok {
		t.Errorf("ask among %d pods found %+v; want none asked", len(more), h)
	}
	if l, g := n.calls(); l != lists || g != gets {
		t.Errorf("ask among %d pods made %d List and %d Get calls; want none", len(more), l-lists, g-gets)
	}
	// Starting the container finds it all the same, by a listing.
	env, err = n.start(n.pod("e00"), "main")
	if err != nil || env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(1) {
		t.Errorf("starting e00: %v, %v", env, err)
	}
	if l, _ := n.calls(); l != lists+1 {
		t.Errorf("starting e00 made %d List calls; want 1", l-lists)
	}
}

// After the last Allocate of a burst, the daemon asks the kubelet about
// the pods its latest listing does not show, oldest first (the kubelet's
// order of admission), so that their containers start without a call to
// the kubelet: more than maxGets of them too, without listing the node.
func TestPrefetch(t *testing.T) {
	n := resolveNode{startNode(t), t}
	n.admit("a", "b")
	lists, gets := n.quiet()
	if lists != 0 || gets < 2 {
		t.Fatalf("after 2 pods were admitted the kubelet served %d List and %d Get calls; want none and 2 or more", lists, gets)
	}
	for _, pod := range []string{"a", "b"} {
		if _, err := n.start(n.pod(pod), "main"); err != nil {
			t.Fatalf("starting %s: %v", pod, err)
		}
	}
	if l, g := n.calls(); l != lists || g != gets {
		t.Errorf("starting 2 prefetched containers made %d List and %d Get calls; want none", l-lists, g-gets)
	}
	// More than maxGets pods not listed, admitted at once.
	more := numbered("e", maxGets+1)
	n.admit(more...)
	lists, gets = n.quiet()
	if lists != 0 {
		t.Errorf("%d listings after %d pods were admitted; want Gets only", lists, len(more))
	}
	for _, pod := range more {
		if _, err := n.start(n.pod(pod), "main"); err != nil {
			t.Fatalf("starting %s: %v", pod, err)
		}
	}
	if l, g := n.calls(); l != lists || g != gets {
		t.Errorf("starting prefetched containers made %d List and %d Get calls; want none", l-lists, g-gets)
	}
}

// The daemon's informer shows pods bound to the node before the kubelet
// admits them. The prefetch asks about the oldest ones the kubelet has
// not shown holding devices, and stops at the first batch in which some
// are not admitted yet: no listing, and the admitted ones start without
// a call to the kubelet.
func TestPrefetchBoundPods(t *testing.T) {
	var (
		mu    sync.Mutex
		bound []*corev1Pod
	)
	n := resolveNode{startNodeWith(t, func(c *Config) {
		c.NodePods = func() []*corev1Pod {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(bound)
		}
	}), t}
	// Each prefetch waits for the admission under way to end. On a busy
	// machine it could otherwise come before the kubelet records the
	// allocation three times running, take the kubelet's order for
	// another, and Get maxGets pods at once: the count of Gets below
	// would depend on the machine, not on the guessing it checks.
	var admitting sync.RWMutex
	n.c.mu.Lock()
	n.c.fetch = func() {
		admitting.RLock()
		admitting.RUnlock() //nolint:staticcheck // a barrier: waits for the admission.
		n.c.prefetch()
	}
	n.c.mu.Unlock()
	admit := func(p *corev1Pod) {
		t.Helper()
		admitting.Lock()
		defer admitting.Unlock()
		if err := n.node.admit(p); err != nil {
			t.Fatal(err)
		}
	}
	created := time.Now().Add(-time.Hour)
	for i := range 3 * maxGets {
		// Names against the order of creation: the prefetch goes by age.
		p := n.pod(fmt.Sprintf("p%02d", 3*maxGets-i))
		p.CreationTimestamp = metav1.NewTime(created.Add(time.Duration(i) * time.Second))
		bound = append(bound, p)
	}
	// Each admission's prefetches end before the next admission: one
	// that fired late would otherwise find two pods admitted and ask
	// fewer questions than the count below names.
	var lists, gets int
	for _, p := range bound[:3] {
		admit(p)
		lists, gets = n.quiet()
	}
	// Admitted one by one, each pod is the oldest not shown: one Get for
	// it, and two for the next ones, not admitted.
	if lists != 0 || gets != 3*3 {
		t.Errorf("after 3 of %d bound pods were admitted the kubelet served %d List and %d Get calls; want none and 9",
			len(bound), lists, gets)
	}
	for _, p := range bound[:3] {
		if _, err := n.start(p, "main"); err != nil {
			t.Fatalf("starting %s: %v", p.Name, err)
		}
	}
	if l, g := n.calls(); l != lists || g != gets {
		t.Errorf("starting 3 prefetched containers made %d List and %d Get calls; want none", l-lists, g-gets)
	}
	// Out of the guessed order: the oldest not shown misses, and the
	// prefetch asks about the next maxGets at once.
	late := bound[3+maxGets/2]
	admit(late)
	lists, gets = n.quiet()
	if _, err := n.start(late, "main"); err != nil {
		t.Fatalf("starting %s: %v", late.Name, err)
	}
	if l, g := n.calls(); l != lists || g != gets {
		t.Errorf("starting a container admitted out of order made %d List and %d Get calls; want none", l-lists, g-gets)
	}
}

// claim is the claim of the pod's container's devices.
func (n resolveNode) claim(pod string) string { return cdi.ClaimOf(memResource, n.ids(pod)) }

// ready reports whether the claim's container was resolved ahead,
// waiting for the prefetches to end (up to 10 s).
func (n resolveNode) ready(claim string) bool {
	ready := func() bool {
		p := n.c.pending[claim]
		return p != nil && p.ready != nil
	}
	n.c.waitFor(func() bool { return ready() || n.c.settled() })
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return ready()
}

// The prefetch resolves the containers it finds ahead of their start and
// writes their CDI specs: they start without a call to the kubelet, each
// with its own GPU, and the claim is forgotten once started.
func TestResolvedAhead(t *testing.T) {
	n := resolveNode{startNode(t), t}
	pods := []string{"a", "b", "c"}
	n.admit(pods...)
	lists, gets := n.quiet()
	for _, pod := range pods {
		claim := n.claim(pod)
		ready := n.ready(claim)
		if _, err := os.Stat(n.specPath(claim)); err != nil || !ready {
			t.Errorf("before %s's container starts: spec %v, resolved ahead %v; want written and resolved", pod, err, ready)
		}
	}
	for _, pod := range pods {
		env, err := n.start(n.pod(pod), "main")
		if want := n.gpuUUID(len(pod) % 2); err != nil || env["NVIDIA_VISIBLE_DEVICES"] != want {
			t.Errorf("starting %s: %v, %v; want GPU %s", pod, env, err, want)
		}
		if claim := n.claim(pod); n.c.allocatedAt(claim, time.Time{}) != (time.Time{}) {
			t.Errorf("%s started and its claim is still pending", pod)
		}
	}
	if l, g := n.calls(); l != lists || g != gets {
		t.Errorf("starting containers resolved ahead made %d List and %d Get calls; want none", l-lists, g-gets)
	}
}

// A container resolved ahead whose devices Allocate names again (its pod
// gone, another pod given them) is not used: the claim is resolved anew
// when its container starts, and a resolution ahead that finishes after
// the new Allocate writes nothing.
func TestResolvedAheadReplaced(t *testing.T) {
	n := resolveNode{startNode(t), t}
	n.admit("a")
	claim := n.claim("a")
	if !n.ready(claim) {
		t.Fatal("a was not resolved ahead")
	}
	// No more prefetches: this test resolves by hand.
	n.c.mu.Lock()
	n.c.after = time.Hour
	n.c.mu.Unlock()
	n.c.mu.Lock()
	old := n.c.pending[claim]
	n.c.mu.Unlock()
	n.c.Allocated(claim)
	if r := n.c.takeReady(claim); r != nil {
		t.Fatalf("a claim allocated again is taken as resolved ahead: %+v", r.Holder)
	}
	path := n.specPath(claim)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	err := n.c.prepareOne(context.Background(), old, claim, podresources.Holder{Namespace: "default", Pod: "a", Container: "main"}, memResource)
	if !errors.Is(err, errReplaced) {
		t.Errorf("resolving ahead for a claim allocated again gave %v; want %v", err, errReplaced)
	}
	if left, _ := os.ReadDir(n.cdiDir); len(left) != 0 {
		t.Errorf("resolving ahead for a claim allocated again left %v in the CDI directory; want nothing", left)
	}
	// The container starts all the same, resolved when it starts.
	env, err := n.start(n.pod("a"), "main")
	if err != nil || env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(1) {
		t.Errorf("starting a: %v, %v", env, err)
	}
}

// A prefetch that comes too early (here the node's pods do not show the
// pod yet; or the kubelet has not recorded its allocation) tries again,
// later, and the container is still resolved ahead of its start.
func TestPrefetchTriesAgain(t *testing.T) {
	var asked atomic.Int32
	n := resolveNode{startNodeWith(t, func(c *Config) {
		pods := c.NodePods
		c.NodePods = func() []*corev1Pod {
			if asked.Add(1) == 1 {
				return nil
			}
			return pods()
		}
	}), t}
	n.admit("a")
	if !n.ready(n.claim("a")) {
		t.Fatalf("a was not resolved ahead after the first prefetch missed it (node's pods read %d times)", asked.Load())
	}
}

// A container whose devices are allocated again while its start looks up
// its pod (its pod gone, the devices given to a new container) gets no
// spec: the new container's, perhaps resolved ahead already, stands.
func TestStartAfterReallocation(t *testing.T) {
	var (
		mu      sync.Mutex
		realloc func()
	)
	n := resolveNode{startNodeWith(t, func(c *Config) {
		get := c.Pods
		c.Pods = func(ctx context.Context, namespace, name string) (*corev1Pod, error) {
			mu.Lock()
			f := realloc
			realloc = nil
			mu.Unlock()
			if f != nil {
				f()
			}
			return get(ctx, namespace, name)
		}
	}), t}
	// No prefetch: a's container is resolved when it starts.
	n.c.mu.Lock()
	n.c.after = time.Hour
	n.c.mu.Unlock()
	n.admit("a")
	claim := n.claim("a")
	mu.Lock()
	realloc = func() { n.c.Allocated(claim) }
	mu.Unlock()
	if env, err := n.start(n.pod("a"), "main"); err == nil || !strings.Contains(err.Error(), errReplaced.Error()) {
		t.Errorf("starting a after its devices were allocated again: %v, %v; want an error containing %q", env, err, errReplaced)
	}
	if _, err := os.Stat(n.specPath(claim)); !os.IsNotExist(err) {
		t.Errorf("a's spec was written after its devices were allocated again (%v)", err)
	}
}

// An unhealthy GPU leaves the kubelet's allocatable devices, and a
// container recorded on it does not start, though resolved ahead.
func TestUnhealthyGPU(t *testing.T) {
	n := startNode(t)
	p := n.pod("on-one", 1, 1024)
	if err := n.admit(p); err != nil {
		t.Fatal(err)
	}
	// Resolved ahead while healthy: checked again when it starts.
	if r := (resolveNode{n, t}); !r.ready(r.claim(p.Name)) {
		t.Fatal("the container was not resolved ahead")
	}
	if err := n.gpus.SetHealth(1, false, "XID 79"); err != nil {
		t.Fatal(err)
	}
	n.WaitAllocatable("gpushare.io/gpu-mem", 16384)
	n.WaitAllocatable("gpushare.io/gpu-core", 100)
	if _, err := n.start(p, "main"); err == nil || !strings.Contains(err.Error(), "unhealthy") {
		t.Fatalf("a container recorded on the unhealthy GPU started: %v", err)
	}
}

// staleKubelet is the claims' kubelet, but with the latest listing set
// by the test.
type staleKubelet struct {
	Kubelet
	mu   sync.Mutex
	last *podresources.Listing
	at   time.Time
}

// set makes l, as if asked for at at, the latest listing.
func (k *staleKubelet) set(l *podresources.Listing, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last, k.at = l, at
}

func (k *staleKubelet) Latest() *podresources.Listing {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last != nil {
		return k.last
	}
	return k.Kubelet.Latest()
}

func (k *staleKubelet) Recent(since time.Time) *podresources.Listing {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last == nil {
		return k.Kubelet.Recent(since)
	}
	if k.at.After(since) {
		return k.last
	}
	return nil
}

// A container whose GPUs the ResourceClaims prepared first would take
// past what they have (Config.ClaimsBeside) is refused as it starts,
// whether the prefetch resolved it ahead or it is resolved then, and
// nothing else changes: the check is asked with the container's pod and
// the GPUs its record gives it.
func TestClaimsBeside(t *testing.T) {
	var (
		mu    sync.Mutex
		asked []string
	)
	refuse := map[string]bool{"b": true, "dd": true}
	n := resolveNode{startNodeWith(t, func(c *Config) {
		c.ClaimsBeside = func(pod *corev1Pod, gpus []string, node []gpu.Device) error {
			mu.Lock()
			defer mu.Unlock()
			var uuids []string
			for _, g := range node {
				uuids = append(uuids, g.UUID)
			}
			slices.Sort(uuids)
			asked = append(asked, pod.Name+"="+strings.Join(gpus, ",")+" of "+strings.Join(uuids, ","))
			if refuse[pod.Name] {
				return errors.New("GPU 1 would hold more with the ResourceClaims prepared on it first: refused")
			}
			return nil
		}
	}), t}
	check := func(pod string) {
		t.Helper()
		env, err := n.start(n.pod(pod), "main")
		switch {
		case refuse[pod] && (err == nil || !strings.Contains(err.Error(), "pod default/"+pod+" container main: GPU 1 would hold")):
			t.Errorf("starting %s: %v, %v; want refused beside the claims", pod, env, err)
		case !refuse[pod] && err != nil:
			t.Errorf("starting %s: %v", pod, err)
		}
	}
	n.admit("a", "b")
	n.quiet()
	for _, pod := range []string{"a", "b"} {
		if !n.ready(n.claim(pod)) {
			t.Fatalf("%s was not resolved ahead", pod)
		}
		check(pod)
	}
	// No prefetch: resolved as they start.
	n.c.mu.Lock()
	n.c.after = time.Hour
	n.c.mu.Unlock()
	n.admit("cc", "dd")
	check("cc")
	check("dd")
	all := " of " + strings.Join(n.gpuUUIDs(), ",")
	want := []string{"a=" + n.gpuUUID(1) + all, "b=" + n.gpuUUID(1) + all, "cc=" + n.gpuUUID(0) + all, "dd=" + n.gpuUUID(0) + all}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked, want) {
		t.Errorf("asked %v; want %v", asked, want)
	}
}
