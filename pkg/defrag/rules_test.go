package defrag

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func running(name, ownerKind string, prio int32, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels},
		Spec: corev1.PodSpec{NodeName: "n", Priority: &prio}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if ownerKind != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: ownerKind, Name: "o", Controller: &yes}}
	}
	return p
}

func TestMayMove(t *testing.T) {
	in := map[string]string{OptIn: "true"}
	optedNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: in}}
	deleting := running("d", "ReplicaSet", 0, in)
	deleting.DeletionTimestamp = &metav1.Time{}
	pending := running("p", "ReplicaSet", 0, in)
	pending.Spec.NodeName = ""
	for _, c := range []struct {
		pod  *corev1.Pod
		ns   *corev1.Namespace
		want string
	}{
		{running("a", "ReplicaSet", 0, in), nil, ""},
		{running("b", "StatefulSet", 100, nil), optedNS, ""},
		{running("c", "Job", 0, in), nil, ""},
		{running("e", "ReplicaSet", 0, nil), nil, "not opted in"},
		{running("f", "", 0, in), nil, "no controller recreates it (a no controller owns it)"},
		{running("g", "DaemonSet", 0, in), nil, "no controller recreates it (a DaemonSet owns it)"},
		{running("h", "ReplicaSet", 1000, in), nil, "priority above the waiting pod's (1000 > 100)"},
		{deleting, nil, "being deleted"},
		{pending, nil, "not running"},
	} {
		err := MayMove(c.pod, c.ns, 100)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.pod.Name, err, c.want)
		}
	}
}

func TestBudgets(t *testing.T) {
	web := map[string]string{"app": "web"}
	pdb := func(name string, sel *metav1.LabelSelector, allowed int32) policyv1.PodDisruptionBudget {
		return policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}, Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	}
	two := []*corev1.Pod{running("a", "ReplicaSet", 0, web), running("b", "ReplicaSet", 0, web)}
	if err := Budgets(two, []policyv1.PodDisruptionBudget{pdb("web", &metav1.LabelSelector{MatchLabels: web}, 2)}); err != nil {
		t.Errorf("two moves, two allowed: %v", err)
	}
	err := Budgets(two, []policyv1.PodDisruptionBudget{pdb("web", &metav1.LabelSelector{MatchLabels: web}, 1)})
	if err == nil || !strings.Contains(err.Error(), "PodDisruptionBudget ns/web allows 1 disruptions, the plan moves 2 of its pods") {
		t.Errorf("two moves, one allowed: %v", err)
	}
	if err := Budgets(two, []policyv1.PodDisruptionBudget{pdb("all", &metav1.LabelSelector{}, 0)}); err == nil {
		t.Error("an empty selector covers every pod of the namespace: want an error")
	}
	other := pdb("other", &metav1.LabelSelector{MatchLabels: web}, 0)
	other.Namespace = "elsewhere"
	if err := Budgets(two, []policyv1.PodDisruptionBudget{other, pdb("none", nil, 0)}); err != nil {
		t.Errorf("budgets of another namespace, or selecting nothing: %v", err)
	}
}

// TestCheckAndRefusals: Check refuses by MayMove first, then by the pod's
// budgets alone; Refusals counts the reasons and names the first budget.
func TestCheckAndRefusals(t *testing.T) {
	in := map[string]string{OptIn: "true", "app": "web"}
	pdbs := []policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}}
	var why Refusals
	if got := why.String(); got != "" {
		t.Errorf("no refusal: %q", got)
	}
	for _, p := range []*corev1.Pod{
		running("a", "ReplicaSet", 0, in),
		running("b", "ReplicaSet", 0, in),
		running("c", "", 0, in),
		running("d", "ReplicaSet", 0, nil),
		running("e", "ReplicaSet", 0, map[string]string{OptIn: "true"}),
	} {
		if err := Check(p, nil, 0, pdbs); err != nil {
			why.Add(err)
		} else if p.Name != "e" {
			t.Errorf("pod %s may move", p.Name)
		}
	}
	want := " (2 a disruption budget forbids it, 1 no controller recreates it, 1 not opted in): " +
		"PodDisruptionBudget ns/web allows 0 disruptions, the plan moves 1 of its pods"
	if got := why.String(); got != want {
		t.Errorf("refusals:\n got %q\nwant %q", got, want)
	}
}
