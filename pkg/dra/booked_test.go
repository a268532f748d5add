package dra

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

// recordedPod is a pod whose allocation record gives its containers
// these shares of GPU uuid (index 0), in order.
func recordedPod(t *testing.T, phase corev1.PodPhase, uuid string, containers ...alloc.ContainerPlacement) *corev1.Pod {
	t.Helper()
	for i := range containers {
		for j := range containers[i].GPUs {
			containers[i].GPUs[j].UUID = uuid
		}
	}
	v, err := gpusharev1.Marshal(record.Record(&alloc.Placement{Node: "node-a", Containers: containers}))
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{gpusharev1.AllocationAnnotation: v}},
		Spec: corev1.PodSpec{NodeName: "node-a"}, Status: corev1.PodStatus{Phase: phase}}
}

func share(mib, pct int64) []alloc.Assignment {
	return []alloc.Assignment{{GPU: 0, Usage: alloc.Usage{MemoryMiB: mib, Compute: pct}}}
}

// What pods book is summed per GPU by the scheduler's rules: app
// containers add up, an init container counts as the most of a phase;
// another system's record books what the pod asks on the GPU it names; a
// record that is not what its pod asks books what it names; ended and
// unbound pods and records that cannot be read book nothing.
func TestPodBookings(t *testing.T) {
	model, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	reader := record.Reader{Requests: model.PodRequest, RequestAnnotations: func(*corev1.Pod) []string { return model.RequestAnnotations() }}
	uuid := t4(0).UUID
	aliyun := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "aliyun", Namespace: "default",
		Annotations: map[string]string{record.AliyunIndex: "0", record.AliyunPod: "2"}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{record.AliyunMemory: *k8sresource.NewQuantity(2, k8sresource.DecimalSI)}}}}}}
	unbound := recordedPod(t, corev1.PodPending, uuid, alloc.ContainerPlacement{Name: "x", Kind: alloc.App, GPUs: share(700, 0)})
	unbound.Spec.NodeName = ""
	pods := []*corev1.Pod{
		recordedPod(t, corev1.PodRunning, uuid,
			alloc.ContainerPlacement{Name: "init", Kind: alloc.Init, GPUs: share(8000, 0)},
			alloc.ContainerPlacement{Name: "a", Kind: alloc.App, GPUs: share(2000, 10)},
			alloc.ContainerPlacement{Name: "b", Kind: alloc.App, GPUs: share(1000, 20)}),
		recordedPod(t, corev1.PodPending, uuid, alloc.ContainerPlacement{Name: "c", Kind: alloc.App, GPUs: share(500, 0)}),
		recordedPod(t, corev1.PodSucceeded, uuid, alloc.ContainerPlacement{Name: "done", Kind: alloc.App, GPUs: share(4000, 50)}),
		aliyun,
		unbound,
		// A GPU the node no longer lists (renumbered, lost): the
		// scheduler keeps it booked, and so does the driver.
		recordedPod(t, corev1.PodRunning, "GPU-gone", alloc.ContainerPlacement{Name: "d", Kind: alloc.App, GPUs: share(300, 0)}),
		{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{gpusharev1.AllocationAnnotation: "{not json"}}, Spec: corev1.PodSpec{NodeName: "node-a"}},
		{},
	}
	got := PodBookings(pods, reader, NodeOf("node-a", []gpu.Device{t4(0), t4(1)}, Options{}))
	if want := (Share{MemoryMiB: 8000 + 500 + 2048, ComputePercent: 30}); len(got) != 2 || got[uuid] != want || got["GPU-gone"] != (Share{MemoryMiB: 300}) {
		t.Errorf("bookings %v; want %s: %+v and GPU-gone: 300 MiB", got, uuid, want)
	}
}

// A claim is refused where it and what the node's pods book would take a
// GPU past its usable memory or compute, and where what they book cannot
// be read.
func TestPrepareCountsPodBookings(t *testing.T) {
	p := preparer(t, nil)
	booked := map[string]Share{t4(0).UUID: {MemoryMiB: 10000, ComputePercent: 80}}
	var bookErr error
	p.Booked = func() (map[string]Share, error) { return booked, bookErr }
	for name, c := range map[string]struct {
		mib, pct int64
		refused  bool
	}{
		"fits":         {4930, 20, false},
		"past memory":  {5000, 0, true},
		"past compute": {100, 21, true},
	} {
		uid := strings.ReplaceAll(name, " ", "-")
		_, err := p.Prepare(claimOf(uid, "gpu", map[string][2]int64{"gpu-0": {c.mib, c.pct}}))
		if refused := err != nil && strings.Contains(err.Error(), "the pods that book it"); refused != c.refused {
			t.Errorf("%s (%d MiB, %d%%): %v; want refused %v", name, c.mib, c.pct, err, c.refused)
		}
		if err == nil {
			if err := p.Unprepare(uid); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The other GPU is nobody's.
	if _, err := p.Prepare(claimOf("other", "gpu", map[string][2]int64{"gpu-1": {14930, 100}})); err != nil {
		t.Errorf("all of the GPU no pod books: %v", err)
	}
	bookErr = errors.New("apiserver down")
	if _, err := p.Prepare(claimOf("blind", "gpu", map[string][2]int64{"gpu-1": {0, 0}})); err == nil || !strings.Contains(err.Error(), "apiserver down") {
		t.Errorf("with the pods' bookings unknown: %v; want the claim refused", err)
	}
}

// A GPU over-committed by a record that came after the claims prepared on
// it (gpushare-node refuses that record's containers) does not get a
// claim on another GPU refused: Prepare checks the claim's own GPUs.
func TestPrepareOwnGPUsOnly(t *testing.T) {
	p := preparer(t, nil)
	if _, err := p.Prepare(claimOf("first", "gpu", map[string][2]int64{"gpu-0": {8192, 0}})); err != nil {
		t.Fatal(err)
	}
	p.Booked = func() (map[string]Share, error) { return map[string]Share{t4(0).UUID: {MemoryMiB: 10000}}, nil }
	if _, err := p.Prepare(claimOf("elsewhere", "gpu", map[string][2]int64{"gpu-1": {1000, 0}})); err != nil {
		t.Errorf("a claim on GPU 1 beside an over-committed GPU 0: %v; want it prepared", err)
	}
	if _, err := p.Prepare(claimOf("there", "gpu", map[string][2]int64{"gpu-0": {100, 0}})); err == nil {
		t.Error("a claim on the over-committed GPU 0 was prepared; want it refused")
	}
}

// As a container starts beside the claims, it is counted with all that
// its own pod books, and each other pod with what it books of the GPUs on
// which one of its containers given them has run: not a pod refused
// beside a claim whose init container (no GPU) ran, nor the GPU of a pod
// whose container there was refused while another, on another GPU, runs.
func TestStartedBookings(t *testing.T) {
	a, b := t4(0).UUID, t4(1).UUID
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError"}}
	ended := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
	type ctr struct {
		name        string
		gpu         int
		mib         int64
		state, last corev1.ContainerState
	}
	pod := func(name string, initRan bool, cs ...ctr) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}, Spec: corev1.PodSpec{NodeName: "node-a"},
			Status: corev1.PodStatus{Phase: corev1.PodPending}}
		var placed []alloc.ContainerPlacement
		for _, c := range cs {
			placed = append(placed, alloc.ContainerPlacement{Name: c.name, Kind: alloc.App,
				GPUs: []alloc.Assignment{{GPU: c.gpu, UUID: t4(c.gpu).UUID, Usage: alloc.Usage{MemoryMiB: c.mib}}}})
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.name, State: c.state, LastTerminationState: c.last})
		}
		if initRan {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: ended}}
		}
		v, err := gpusharev1.Marshal(record.Record(&alloc.Placement{Node: "node-a", Containers: placed}))
		if err != nil {
			t.Fatal(err)
		}
		p.Annotations = map[string]string{gpusharev1.AllocationAnnotation: v}
		return p
	}
	starting := pod("starting", false, ctr{name: "main", gpu: 0, mib: 1000})
	pods := []*corev1.Pod{
		pod("starting", false, ctr{name: "main", gpu: 0, mib: 9999, state: running}), // its own older copy
		pod("running", false, ctr{name: "main", gpu: 0, mib: 2000, state: running}),
		pod("refused", true, ctr{name: "main", gpu: 0, mib: 3000, state: waiting}),
		pod("partial", false, ctr{name: "x", gpu: 1, mib: 300, state: running}, ctr{name: "y", gpu: 0, mib: 2000, state: waiting}),
		pod("restarting", false, ctr{name: "r", gpu: 1, mib: 500, state: waiting, last: ended}),
	}
	got := StartedBookings(pods, starting, record.Reader{}, NodeOf("node-a", []gpu.Device{t4(0), t4(1)}, Options{}))
	if want := map[string]Share{a: {MemoryMiB: 3000}, b: {MemoryMiB: 800}}; len(got) != 2 || got[a] != want[a] || got[b] != want[b] {
		t.Errorf("bookings %v; want %v", got, want)
	}
}
