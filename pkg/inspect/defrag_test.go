package inspect

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/defrag"
)

// defragFixture: two nodes of two 16 GiB T4s. a's GPUs hold a pod of 8
// GiB each, owned by a ReplicaSet and opted in (web-0 by its own label,
// web-1 by namespace ml's); b's GPU 0 holds 12 GiB and GPU 1 dbMiB, not
// opted in. A whole-GPU pod waits.
func defragFixture(t *testing.T, dbMiB string) DefragInput {
	m := model(t)
	t4 := gpusharev1.GPU{Model: "Tesla T4", MemoryMiB: 16384, Healthy: true}
	invs := map[string]*gpusharev1.GPUInventory{
		"a": inventory("a", gpusharev1.ModeShared, t4, t4),
		"b": inventory("b", gpusharev1.ModeShared, t4, t4),
	}
	var pods []corev1.Pod
	yes := true
	add := func(ns, name, node string, gpu int, optIn bool, mib string) {
		p := pod(ns, name).app("main", mib, "").obj()
		p.Spec.NodeName, p.Status.Phase = node, corev1.PodRunning
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web", Controller: &yes}}
		p.Labels = map[string]string{"app": name}
		if optIn {
			p.Labels[defrag.OptIn] = "true"
		}
		p.Annotations = map[string]string{gpusharev1.AllocationAnnotation: recordFor(t, m, p, invs[node], [][]int{{gpu}})}
		pods = append(pods, *p)
	}
	add("default", "web-0", "a", 0, true, "8192")
	add("ml", "web-1", "a", 1, false, "8192")
	add("default", "db-0", "b", 0, false, "12288")
	add("default", "db-1", "b", 1, false, dbMiB)
	big := pod("default", "big").count("main", "1").obj()
	big.Status.Phase = corev1.PodPending
	pods = append(pods, *big)
	pl, err := alloc.NewPlacer(alloc.Config{Node: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	return DefragInput{
		Input: Input{Nodes: []corev1.Node{node(t, "a", "10.0.0.1", invs["a"], ""), node(t, "b", "10.0.0.2", invs["b"], "")},
			Pods: pods, Now: now, Requests: m.PodRequest, SetLargestGPU: m.SetLargestGPU},
		Namespaces: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{defrag.OptIn: "true"}}}},
		Placer:     pl, Budget: alloc.DefragBudget{MaxMoves: 3},
	}
}

// TestDefragDryRun: the whole-GPU pod that fits nowhere gets a plan that
// moves one opted-in pod off a to b's GPU 1, which has room for it.
func TestDefragDryRun(t *testing.T) {
	in := defragFixture(t, "4096")
	d, err := BuildDefrag(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Waiting) != 1 {
		t.Fatalf("waiting %+v, want the one pod", d.Waiting)
	}
	w := d.Waiting[0]
	if w.Outcome != "plan" || w.Node != "a" || len(w.Moves) != 1 || w.Moves[0].To != "b" || w.Moves[0].MemoryMiB != 8192 || w.MovedMiB != 8192 {
		t.Fatalf("plan %+v, want one 8 GiB pod moved from a to b, then the pod on a", w)
	}
	var out bytes.Buffer
	if err := WriteDefrag(&out, d, GiB); err != nil {
		t.Fatal(err)
	}
	want := "default/big  0         move 1 pod(s), 8 GiB: " + w.Moves[0].Pod + " from a (GPU " + joinInts(w.Moves[0].FromGPUs) + ") to b (GPU 1); then on a (GPU " + joinInts(w.GPUs) + ")"
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "Dry run: nothing moves") {
		t.Errorf("output:\n%s\nwant a line %q", out.String(), want)
	}
}

// Nothing may move, and why; then a budget that forbids the move.
func TestDefragRefused(t *testing.T) {
	in := defragFixture(t, "4096")
	in.Namespaces = nil
	for i := range in.Pods {
		delete(in.Pods[i].Labels, defrag.OptIn)
	}
	d, err := BuildDefrag(in)
	if err != nil {
		t.Fatal(err)
	}
	if w := d.Waiting[0]; w.Outcome != "none" || !strings.Contains(w.Reason, "no pod may move (4 not opted in)") {
		t.Errorf("nobody opted in: %+v", w)
	}

	in = defragFixture(t, "4096")
	in.PDBs = []policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web-0"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}}
	d, err = BuildDefrag(in)
	if err != nil {
		t.Fatal(err)
	}
	// web-0's budget keeps it; web-1 (namespace ml opts in) moves.
	if w := d.Waiting[0]; w.Outcome != "plan" || len(w.Moves) != 1 || w.Moves[0].Pod != "ml/web-1" {
		t.Errorf("with web-0's budget at 0: %+v, want ml/web-1 moved", w)
	}

	// With 12 GiB on b's GPU 1 too, a moved pod fits nowhere else.
	d, err = BuildDefrag(defragFixture(t, "12288"))
	if err != nil {
		t.Fatal(err)
	}
	if w := d.Waiting[0]; w.Outcome != "none" || !strings.Contains(w.Reason, "no plan of at most 3 moves") {
		t.Errorf("b full: %+v", w)
	}
}
