package defrag

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// OptIn is the label, on a pod or its namespace, by which its pods opt in
// to being moved: "true".
const OptIn = "gpushare.io/movable"

// Recreators are the controller kinds that recreate a moved pod.
var Recreators = []string{"ReplicaSet", "StatefulSet", "Job"}

// Refusal says why a pod may not move: Reason in a few words, the same
// for every pod refused so (to count them), and Detail.
type Refusal struct{ Reason, Detail string }

func (r *Refusal) Error() string {
	if r.Detail == "" {
		return r.Reason
	}
	return r.Reason + " (" + r.Detail + ")"
}

// MayMove returns nil if pod, in namespace ns (nil if unknown), may be
// moved to make room for a pod of priority waiting, or a *Refusal.
func MayMove(pod *corev1.Pod, ns *corev1.Namespace, waiting int32) error {
	switch {
	case pod.Spec.NodeName == "" || pod.Status.Phase != corev1.PodRunning:
		return &Refusal{Reason: "not running"}
	case pod.DeletionTimestamp != nil:
		return &Refusal{Reason: "being deleted"}
	case pod.Labels[OptIn] != "true" && (ns == nil || ns.Labels[OptIn] != "true"):
		return &Refusal{"not opted in", fmt.Sprintf("label %s=true on the pod or its namespace", OptIn)}
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || !slices.Contains(Recreators, owner.Kind) {
		return &Refusal{"no controller recreates it", fmt.Sprintf("a %v owns it", ownerKind(owner))}
	}
	if p := priority(pod); p > waiting {
		return &Refusal{"priority above the waiting pod's", fmt.Sprintf("%d > %d", p, waiting)}
	}
	return nil
}

func ownerKind(o *metav1.OwnerReference) string {
	if o == nil {
		return "no controller"
	}
	return o.Kind
}

func priority(pod *corev1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// Priority is a pod's priority, 0 where unset.
func Priority(pod *corev1.Pod) int32 { return priority(pod) }

// reasonBudget is the Reason of a Refusal by a disruption budget.
const reasonBudget = "a disruption budget forbids it"

// Budgets returns nil if moving pods (all in their own namespaces)
// leaves every PodDisruptionBudget of pdbs within its disruptionsAllowed,
// or a *Refusal naming the one it would break.
func Budgets(pods []*corev1.Pod, pdbs []policyv1.PodDisruptionBudget) error {
	for i := range pdbs {
		b := &pdbs[i]
		// An empty selector matches every pod of the namespace (policy/v1),
		// an invalid one none.
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil {
			continue
		}
		n := 0
		for _, p := range pods {
			if p.Namespace == b.Namespace && sel.Matches(labels.Set(p.Labels)) {
				n++
			}
		}
		if n > int(b.Status.DisruptionsAllowed) {
			return &Refusal{reasonBudget, fmt.Sprintf("PodDisruptionBudget %s/%s allows %d disruptions, the plan moves %d of its pods",
				b.Namespace, b.Name, b.Status.DisruptionsAllowed, n)}
		}
	}
	return nil
}

// Check returns nil if pod may move for a waiting pod of priority
// waiting (MayMove) and moving it alone keeps its budgets (Budgets), or
// the *Refusal.
func Check(pod *corev1.Pod, ns *corev1.Namespace, waiting int32, pdbs []policyv1.PodDisruptionBudget) error {
	if err := MayMove(pod, ns, waiting); err != nil {
		return err
	}
	return Budgets([]*corev1.Pod{pod}, pdbs)
}

// Refusals counts why pods may not move, by reason, and keeps the first
// disruption budget's detail, to say why no pod may move.
type Refusals struct {
	byReason map[string]int
	budget   string
}

// Add counts err, a *Refusal (others count under their message).
func (r *Refusals) Add(err error) {
	if r.byReason == nil {
		r.byReason = map[string]int{}
	}
	var ref *Refusal
	if !errors.As(err, &ref) {
		r.byReason[err.Error()]++
		return
	}
	r.byReason[ref.Reason]++
	if ref.Reason == reasonBudget && r.budget == "" {
		r.budget = ref.Detail
	}
}

// String renders the counts, in the reasons' order, and
// the first budget's detail: " (1 a disruption budget forbids it, 1 not
// opted in): PodDisruptionBudget web/web allows 0 disruptions, ...";
// "" when none was counted.
func (r *Refusals) String() string {
	if len(r.byReason) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(r.byReason))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", r.byReason[k], k)
	}
	out := " (" + strings.Join(parts, ", ") + ")"
	if r.budget != "" {
		out += ": " + r.budget
	}
	return out
}
