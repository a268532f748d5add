package extender

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// holds reports whether r holds a reservation for uid.
func (r *reservations) holds(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.at[uid]
	return ok
}

// held is the number of reservations held.
func (r *reservations) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
}

// clock makes ts's reservations read the returned time.
func clock(ts *testServer) *time.Time {
	now := time.Unix(1_800_000_000, 0)
	ts.reserved.now = func() time.Time { return now }
	return &now
}

// TestFilterReservesUntilBind: kube-scheduler filters the next pod before
// it binds this one. A pod passed on one node holds its GPUs from its
// filter call on, so the next pod is not passed onto GPUs already taken,
// and both binds succeed.
func TestFilterReservesUntilBind(t *testing.T) {
	a, b := pod("a", 10240), pod("b", 10240)
	ts := newTestServer(t, a, b)
	if got := ts.filter(t, a, "n1"); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("filter passed a on %v, want n1", got)
	}
	if p, assumed := ts.Cache.Holding(a.UID); p == nil || !assumed || p.Node != "n1" {
		t.Fatalf("a holds %v (assumed %v) after its filter, want n1 assumed", p, assumed)
	}
	if got := ts.filter(t, b, "n1"); len(got) != 0 {
		t.Fatalf("filter passed b on %v, though a's 10 GiB leave 6 of n1's 16", got)
	}
	if got := ts.filter(t, b, "n1", "n2"); !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("filter passed b on %v, want n2", got)
	}
	for p, node := range map[string]string{"a": "n1", "b": "n2"} {
		if got := ts.bind(t, pod(p, 10240), node); got != "" {
			t.Fatalf("bind %s to %s: %q", p, node, got)
		}
		if ts.boundTo(p) != node {
			t.Errorf("%s bound to %q, want %s", p, ts.boundTo(p), node)
		}
	}
	if n := ts.reserved.held(); n != 0 {
		t.Errorf("%d reservations held after the binds, want 0", n)
	}
	if p, _ := ts.Cache.Holding(a.UID); p == nil || p.Node != "n1" {
		t.Errorf("a holds %v after its bind, want n1", p)
	}
}

// TestFilterAgainReplacesReservation: a pod filtered again (its cycle
// failed elsewhere) is rated without what its earlier call reserved, and
// holds one reservation.
func TestFilterAgainReplacesReservation(t *testing.T) {
	a := pod("a", 10240)
	ts := newTestServer(t, a)
	for range 3 {
		if got := ts.filter(t, a, "n1"); !slices.Equal(got, []string{"n1"}) {
			t.Fatalf("filter passed a on %v, want n1 each time", got)
		}
	}
	if n := ts.reserved.held(); n != 1 {
		t.Errorf("%d reservations held, want 1", n)
	}
	var booked int64
	if err := ts.Cache.Read("n1", func(s *alloc.NodeState) { booked = s.GPUs[0].MemoryMiB }); err != nil {
		t.Fatal(err)
	}
	if booked != 10240 {
		t.Errorf("n1 has %d MiB booked, want a's 10240 once", booked)
	}
}

// TestReservationExpires: a pod whose bind never comes stops holding its
// GPUs after ReservationTTL; a late bind places it again.
func TestReservationExpires(t *testing.T) {
	a, b := pod("a", 10240), pod("b", 10240)
	ts := newTestServer(t, a, b)
	now := clock(ts)
	ts.filter(t, a, "n1")
	*now = now.Add(ReservationTTL)
	ts.ExpireReservations()
	if p, _ := ts.Cache.Holding(a.UID); p == nil {
		t.Fatal("a's reservation expired at the TTL, not after it")
	}
	*now = now.Add(time.Second)
	ts.ExpireReservations()
	if p, _ := ts.Cache.Holding(a.UID); p != nil {
		t.Fatalf("a still holds %v after the TTL", p)
	}
	if got := ts.bind(t, a, "n1"); got != "" {
		t.Fatalf("a late bind: %q", got)
	}
	if p, _ := ts.Cache.Holding(a.UID); p == nil || p.Node != "n1" {
		t.Errorf("a holds %v after its late bind, want n1", p)
	}
	// A filter call expires what is past the TTL too.
	ts.filter(t, b, "n2")
	*now = now.Add(ReservationTTL + time.Second)
	ts.filter(t, a, "n1") // a is bound in the fake API, not in the filter's view
	if p, _ := ts.Cache.Holding(b.UID); p != nil {
		t.Errorf("b still holds %v after the TTL and a later filter call", p)
	}
}

// TestRefusedBindDropsReservation: a bind that fails gives back what the
// pod's filter reserved.
func TestRefusedBindDropsReservation(t *testing.T) {
	a, b := pod("a", 10240), pod("b", 10240)
	ts := newTestServer(t, a, b)
	ts.filter(t, a, "n1")
	if got := ts.bind(t, a, "n2"); !strings.Contains(got, "did not pass node n2") {
		t.Fatalf("bind onto a node filter did not pass: %q", got)
	}
	if p, _ := ts.Cache.Holding(a.UID); p != nil {
		t.Fatalf("a holds %v after a refused bind", p)
	}
	if got := ts.filter(t, b, "n1"); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("filter passed b on %v, want n1", got)
	}
}

// TestNoReservationForOthers: filter holds nothing for a pod of another
// scheduler, one already bound, one without a UID, one the informer does
// not hold (a made-up pod), nor for a pod passed on several nodes.
func TestNoReservationForOthers(t *testing.T) {
	other := pod("other", 1024)
	other.Spec.SchedulerName = "someone-else"
	bound := pod("bound", 1024)
	bound.Spec.NodeName = "n2"
	noUID := pod("no-uid", 1024)
	noUID.UID = ""
	madeUp := pod("made-up", 1024)
	soft := pod("soft", 1024)
	soft.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway}}
	ts := newTestServer(t)
	indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	for _, p := range []any{other, bound, noUID, soft} {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	ts.Pods = corelisters.NewPodLister(indexer)
	for _, p := range []*corev1.Pod{other, bound, noUID, madeUp} {
		if got := ts.filter(t, p, "n1"); !slices.Equal(got, []string{"n1"}) {
			t.Fatalf("filter passed %s on %v, want n1", p.Name, got)
		}
	}
	if got := ts.filter(t, soft, "n1", "n2"); len(got) != 2 {
		t.Fatalf("filter passed %s on %v, want both nodes", soft.Name, got)
	}
	if n := ts.reserved.held(); n != 0 {
		t.Errorf("%d reservations held, want 0", n)
	}
	for _, n := range []string{"n1", "n2"} {
		if err := ts.Cache.Read(n, func(s *alloc.NodeState) {
			if s.GPUs[0].MemoryMiB != 0 {
				t.Errorf("%s has %d MiB booked, want none", n, s.GPUs[0].MemoryMiB)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFilterCountsWaiting: a pod of this extender's schedulers that no
// node sent fits waits, and its GPU demand counts for keeping idle GPUs
// spare (cache.Cache.Room), once however often it is filtered; a call
// naming a pod the informer does not hold counts nothing.
func TestFilterCountsWaiting(t *testing.T) {
	big := pod("big", 20480) // more than n1's 16 GiB GPU
	ts := newTestServer(t, big)
	indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	if err := indexer.Add(big); err != nil {
		t.Fatal(err)
	}
	ts.Pods = corelisters.NewPodLister(indexer)
	for range 3 {
		if got := ts.filter(t, big, "n1"); len(got) != 0 {
			t.Fatalf("filter passed big on %v, want none", got)
		}
	}
	if got := ts.Cache.Waiting(); got != 1000 {
		t.Errorf("waiting GPU demand %d after big fit no node, want 1000 (once)", got)
	}
	madeUp := pod("made-up", 20480)
	if got := ts.filter(t, madeUp, "n1"); len(got) != 0 {
		t.Fatalf("filter passed made-up on %v, want none", got)
	}
	if got := ts.Cache.Waiting(); got != 1000 {
		t.Errorf("waiting GPU demand %d after a made-up pod's call, want still 1000", got)
	}
}
