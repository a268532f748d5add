package refused

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	gpucache "github.com/gpushare/gpushare/pkg/cache"
)

type fixture struct {
	r        *Releaser
	client   *fake.Clientset
	recorder *events.FakeRecorder
	now      time.Time
	bookings []gpucache.Overbooked
}

func newFixture(t *testing.T, pods ...*corev1.Pod) *fixture {
	t.Helper()
	f := &fixture{r: &Releaser{}, recorder: events.NewFakeRecorder(10), now: time.Unix(1000, 0)}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	f.client = fake.NewClientset()
	for _, p := range pods {
		if _, err := f.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.r.Start(Config{Bookings: func() []gpucache.Overbooked { return f.bookings }, Pods: corelisters.NewPodLister(indexer),
		Client: f.client, Recorder: f.recorder, Logger: klog.Background(), Grace: 10 * time.Second,
		Now: func() time.Time { return f.now }})
	return f
}

// refuse posts, as from component and seen now, the kubelet's event that
// it could not prepare p's claim (over's), for the over-commit.
func (f *fixture) refuse(t *testing.T, p *corev1.Pod, component string) {
	t.Helper()
	f.refuseWith(t, p, component, f.now, "Failed to prepare dynamic resources: NodePrepareResources failed for claim ns/"+p.Name+
		"-gpu: claim ns/"+p.Name+"-gpu: GPU gpu-0 would hold 20192 of 15360 MiB and 0% compute: refused")
}

func (f *fixture) refuseWith(t *testing.T, p *corev1.Pod, component string, at time.Time, message string) {
	t.Helper()
	f.post(t, p, KubeletRefusal, component, at, message)
}

// post posts an event on p with reason, as from component, seen at.
func (f *fixture) post(t *testing.T, p *corev1.Pod, reason, component string, at time.Time, message string) {
	t.Helper()
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%s.%s.%d.%d", p.Name, reason, component, at.Unix(), len(message)), Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Reason:         reason, Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: component, Host: "n"},
		Message: message, FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at)}
	if _, err := f.client.CoreV1().Events(p.Namespace).Create(context.Background(), e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func pod(name string, bound time.Time) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid")},
		Spec: corev1.PodSpec{NodeName: "n"},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(bound)}}}}
}

func over(p *corev1.Pod) gpucache.Overbooked {
	return gpucache.Overbooked{Claim: "ns/" + p.Name + "-gpu", Node: "n", Namespace: "ns", Pod: p.Name, PodUID: p.UID, GPUs: []int{0}}
}

func (f *fixture) pods(t *testing.T) []string {
	t.Helper()
	list, err := f.client.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names
}

// TestReleaseAfterGrace: a pod waiting unstarted with an over-committing
// claim is deleted once it has waited the grace and its node's kubelet
// has said it refused the claim, with an event that names its claim, GPU
// and node and says what follows. Without that event, or with one that
// is not the kubelet's, it waits on.
func TestReleaseAfterGrace(t *testing.T) {
	p := pod("a", time.Unix(900, 0))
	p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Controller: ptr.To(true)}}
	f := newFixture(t, p)
	f.bookings = []gpucache.Overbooked{over(p)}
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 1 {
		t.Fatalf("deleted before the grace: pods %v", got)
	}
	f.now = f.now.Add(10 * time.Second)
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 1 {
		t.Fatalf("deleted with no refusal from its node: pods %v", got)
	}
	f.refuse(t, p, "tenant")
	// The kubelet's passing trouble, and a refusal seen before the
	// over-commit was found, are no refusal of this over-commit.
	f.refuseWith(t, p, "kubelet", f.now, "Failed to prepare dynamic resources: pod a is not allowed to use ResourceClaim ns/a-gpu")
	f.refuseWith(t, p, "kubelet", f.now.Add(-10*time.Second-eventSkew-time.Second),
		"Failed to prepare dynamic resources: claim ns/a-gpu: GPU gpu-0 would hold 20192 of 15360 MiB: refused")
	f.refuseWith(t, p, "kubelet", f.now, "Failed to prepare dynamic resources: claim ns/other: GPU gpu-0 would hold 20192 of 15360 MiB: refused")
	f.now = f.now.Add(recheck)
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 1 {
		t.Fatalf("deleted on an event that is not the kubelet's, not a refusal, stale or of another claim: pods %v", got)
	}
	f.refuse(t, p, "kubelet")
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 1 {
		t.Fatalf("events read again within %s: pods %v", recheck, got)
	}
	f.now = f.now.Add(recheck)
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 0 {
		t.Fatalf("pods %v after the grace; want a deleted", got)
	}
	select {
	case e := <-f.recorder.Events:
		for _, want := range []string{"Warning " + Reason, "ResourceClaim ns/a-gpu books GPU 0 of node n", "refuses to prepare",
			"its ReplicaSet rs creates it again"} {
			if !strings.Contains(e, want) {
				t.Errorf("event %q; want %q in it", e, want)
			}
		}
	default:
		t.Error("no event")
	}
}

// TestReleaseSparesStarted: a pod with a started container or init
// container, a running one, one whose UID is not the claim's, one bound
// elsewhere, and one whose claim other pods share are never deleted,
// though their node refused a claim.
func TestReleaseSparesStarted(t *testing.T) {
	started := pod("started", time.Unix(900, 0))
	started.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	init := pod("init", time.Unix(900, 0))
	init.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "i", Started: ptr.To(true)}}
	running := pod("running", time.Unix(900, 0))
	running.Status.Phase = corev1.PodRunning
	elsewhere := pod("elsewhere", time.Unix(900, 0))
	elsewhere.Spec.NodeName = "m"
	other := pod("other", time.Unix(900, 0))
	f := newFixture(t, started, init, running, elsewhere, other)
	for _, p := range []*corev1.Pod{started, init, running, elsewhere, other} {
		f.refuse(t, p, "kubelet")
	}
	o := over(other)
	o.PodUID = "a-new-pod"
	shared := over(other)
	shared.Pod, shared.PodUID = "", ""
	f.bookings = []gpucache.Overbooked{over(started), over(init), over(running), over(elsewhere), o, shared}
	for range 3 {
		f.r.Release(context.Background())
		f.now = f.now.Add(time.Minute)
	}
	if got := f.pods(t); len(got) != 5 {
		t.Errorf("pods %v; want all five kept", got)
	}
}

// TestReleaseOnePerNode: of two pods waiting on one node, the one bound
// last goes first, and the other is judged again only after the cache
// has had the grace to show the room the first freed.
func TestReleaseOnePerNode(t *testing.T) {
	early, late := pod("early", time.Unix(900, 0)), pod("late", time.Unix(950, 0))
	f := newFixture(t, early, late)
	f.refuse(t, early, "kubelet")
	f.refuse(t, late, "kubelet")
	f.bookings = []gpucache.Overbooked{over(early), over(late)}
	f.r.Release(context.Background())
	f.now = f.now.Add(10 * time.Second)
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 1 || got[0] != "early" {
		t.Fatalf("pods %v; want early alone", got)
	}
	f.bookings = []gpucache.Overbooked{over(early)}
	f.now = f.now.Add(5 * time.Second)
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 1 {
		t.Fatalf("pods %v: deleted while the node settles", got)
	}
	f.now = f.now.Add(5 * time.Second)
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 0 {
		t.Fatalf("pods %v; want early deleted once the node settled", got)
	}
}

// TestReleaseNothingBeforeStart: a Releaser not started does nothing,
// and Start takes its first Config alone.
func TestReleaseNothingBeforeStart(t *testing.T) {
	var r Releaser
	r.Release(context.Background())
	p := pod("a", time.Unix(900, 0))
	f := newFixture(t, p)
	f.bookings = []gpucache.Overbooked{over(p)}
	f.r.Start(Config{Bookings: func() []gpucache.Overbooked { return nil }})
	f.r.Release(context.Background())
	f.refuse(t, p, "kubelet")
	f.now = f.now.Add(time.Hour)
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 0 {
		t.Errorf("pods %v; the second Start replaced the first Config", got)
	}
}

// TestReleaseRecordBesideClaims: a pod whose allocation record came to
// its node after a claim was prepared on its GPU, whose containers the
// node refuses (the kubelet's Failed event with gpushare-node's words),
// is deleted after the grace with an event that says why, though its
// init container, which asks no GPU, has run. Other failures to create
// its container (an image, a config map), and a refusal of a claim, are
// not that.
func TestReleaseRecordBesideClaims(t *testing.T) {
	p := pod("rec", time.Unix(900, 0))
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError"}}}}
	if Waiting(p, "n", nil) {
		t.Error("a pod whose init container ran is waiting with none started")
	}
	f := newFixture(t, p)
	f.bookings = []gpucache.Overbooked{{Node: "n", Namespace: "ns", Pod: p.Name, PodUID: p.UID, GPUs: []int{0}, Containers: []string{"main"}}}
	f.r.Release(context.Background())
	f.now = f.now.Add(10 * time.Second)
	f.post(t, p, KubeletFailed, "kubelet", f.now, `Error: configmap "cfg" not found`)
	f.refuseWith(t, p, "kubelet", f.now, "Failed to prepare dynamic resources: claim ns/rec-gpu: GPU gpu-0 would hold 20192 of 15360 MiB: refused")
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 1 {
		t.Fatalf("deleted on a failure that is not the refusal beside claims: pods %v", got)
	}
	f.now = f.now.Add(recheck)
	f.post(t, p, KubeletFailed, "kubelet", f.now, "Error: device plugin PreStartContainer rpc failed with err: rpc error: code = Unknown "+
		"desc = pod ns/rec container main: GPU 0 (GPU-a) would hold 20192 of 15360 MiB and 0% compute with the pods that book it "+
		"(12000 MiB, 0%) and the "+BesideWords+" (8192 MiB, 0%): refused")
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 0 {
		t.Fatalf("pods %v after the node refused the record's container; want rec deleted", got)
	}
	select {
	case e := <-f.recorder.Events:
		for _, want := range []string{"Warning " + Reason, "allocation record books GPU 0 of node n", "refuses its containers",
			"no controller owns the pod"} {
			if !strings.Contains(e, want) {
				t.Errorf("event %q; want it to contain %q", e, want)
			}
		}
	default:
		t.Error("no event on the deleted pod")
	}
}

// TestReleaseLeaderOnly: a replica that does not lead reads no events and
// deletes nothing; once it leads, it releases as any.
func TestReleaseLeaderOnly(t *testing.T) {
	p := pod("a", time.Unix(900, 0))
	f := newFixture(t, p)
	leads := false
	f.r.Leading = func() bool { return leads }
	f.bookings = []gpucache.Overbooked{over(p)}
	f.r.Release(context.Background())
	f.refuse(t, p, "kubelet")
	f.now = f.now.Add(time.Minute)
	f.client.ClearActions()
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 1 {
		t.Fatalf("pods %v: a standby deleted", got)
	}
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource == "events" {
			t.Errorf("a standby read events: %v", a)
		}
	}
	leads = true
	f.refuse(t, p, "kubelet")
	f.r.Release(context.Background())
	if got := f.pods(t); len(got) != 0 {
		t.Fatalf("pods %v; want a deleted by the leader", got)
	}
}
