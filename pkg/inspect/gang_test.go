package inspect

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// TestGangs: one node of two 16 GiB T4s, GPU 0 holding 12 GiB. A gang
// bound (placed); two 4 GiB pods, which fit now; four 8 GiB pods, of which
// two fit now and all four on empty GPUs (waits); three 20 GiB pods, which
// no T4 holds, and three 12 GiB pods, one to a GPU (never); one short of
// its pods; one of no GPUs.
func TestGangs(t *testing.T) {
	m := model(t)
	t4 := gpusharev1.GPU{Model: "Tesla T4", MemoryMiB: 16384, Healthy: true}
	inv := inventory("a", gpusharev1.ModeShared, t4, t4)
	busy := pod("default", "busy").app("main", "12288", "").obj()
	busy.Spec.NodeName, busy.Status.Phase = "a", corev1.PodRunning
	busy.Annotations = map[string]string{gpusharev1.AllocationAnnotation: recordFor(t, m, busy, inv, [][]int{{0}})}
	pods := []corev1.Pod{*busy}
	var groups []schedulingv1beta1.PodGroup
	gang := func(name string, minCount int32, n int, mib string, bound int) {
		groups = append(groups, schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}}}})
		for i := range n {
			b := pod("default", name+"-"+string(rune('0'+i)))
			if mib != "" {
				b.app("main", mib, "")
			} else {
				b.p.Spec.Containers = []corev1.Container{{Name: "main"}}
			}
			p := b.obj()
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
			if i < bound {
				p.Spec.NodeName = "elsewhere"
			}
			pods = append(pods, *p)
		}
	}
	gang("bound", 2, 2, "8192", 2)
	gang("pair", 2, 2, "4096", 0)
	gang("four", 4, 4, "8192", 0)
	gang("huge", 3, 3, "20480", 0)
	gang("wide", 3, 3, "12288", 0)
	gang("short", 3, 2, "1024", 0)
	gang("plain", 2, 2, "", 0)
	// Two 1 GiB pods and one of no GPUs: it is not the GPUs.
	gang("mixed", 3, 2, "1024", 0)
	plain := pod("default", "mixed-2").obj()
	plain.Spec.Containers = []corev1.Container{{Name: "main"}}
	plain.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("mixed")}
	pods = append(pods, *plain)
	pl, err := alloc.NewPlacer(alloc.Config{Node: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := BuildGangs(GangInput{Input: Input{Nodes: []corev1.Node{node(t, "a", "10.0.0.1", inv, "")}, Pods: pods, Now: now,
		Requests: m.PodRequest, SetLargestGPU: m.SetLargestGPU}, Groups: groups, Placer: pl})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"default/bound": GangPlaced,
		"default/pair":  GangFitsNow + ": the 2 pod(s) it needs fit the GPUs as they are; if it still waits, GPUs are not why: see its condition and its pods' events (node selectors, affinity, one schedulerName for all)",
		"default/mixed": GangFitsNow + ": the 3 pod(s) it needs fit the GPUs as they are; if it still waits, GPUs are not why: see its condition and its pods' events (node selectors, affinity, one schedulerName for all)",
		"default/four":  GangWaits + ": 2 of the 4 pod(s) it needs fit the GPUs as they are; none binds until all do",
		"default/huge":  GangNever + ": pod huge-0: container \"main\": gpushare.io/gpu-mem: 20480 MiB per GPU is more than the largest GPU holds (16384 MiB)",
		"default/wide":  GangNever + ": even with every GPU free, 2 of the 3 pod(s) it needs fit at once",
		"default/short": GangTooFew + ": 2 pod(s) exist of the 3 it needs",
		"default/plain": GangNotShare + ": its waiting pods ask no GPUs of gpushare: kube-scheduler's reasons are the ones",
	}
	if len(got) != len(want) {
		t.Fatalf("%d gangs, want %d: %+v", len(got), len(want), got)
	}
	for _, g := range got {
		v := g.Verdict
		if g.Why != "" {
			v += ": " + g.Why
		}
		if v != want[g.Name] {
			t.Errorf("%s: %q, want %q", g.Name, v, want[g.Name])
		}
	}
	var out bytes.Buffer
	if err := WriteGangs(&out, got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "default/huge   3    3     0      -      never fits") {
		t.Errorf("table:\n%s", out.String())
	}
}

// TestPodGang: the pod view names the gang a pod waits with, or the
// PodGroup it names that does not exist, in place of "no scheduling
// attempt has failed yet".
func TestPodGang(t *testing.T) {
	p := pod("default", "ghost-0").app("main", "1024", "").obj()
	p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("nosuch")}
	missing := apierrors.NewNotFound(schedulingv1beta1.Resource("podgroups"), "nosuch")
	var out bytes.Buffer
	if err := WritePod(&out, BuildPod(&Cluster{}, PodInput{Pod: p, GroupErr: missing}), GiB); err != nil {
		t.Fatal(err)
	}
	if want := "Gang:       names PodGroup default/nosuch, which does not exist: kube-scheduler tries none of its pods until it does"; !strings.Contains(out.String(), want) ||
		strings.Contains(out.String(), "no scheduling attempt") {
		t.Errorf("pod view:\n%s\nwant %q and no word of attempts", out.String(), want)
	}
	g := &schedulingv1beta1.PodGroup{Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
		Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 3}}}}
	if v := BuildPod(&Cluster{}, PodInput{Pod: p, Group: g}); !strings.Contains(v.Gang, "placed only with 3 of its pods at once") {
		t.Errorf("gang member: %q", v.Gang)
	}
}
