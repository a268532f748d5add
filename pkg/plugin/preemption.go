package plugin

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/decision"
)

// Preemption. kube-scheduler's DefaultPreemption asks, node by node and
// on a copy of the cycle state, whether the pod would fit with pods of
// lower priority gone: it removes them all (RemovePod), runs Filter, then
// adds them back one by one (AddPod), most important first, keeping each
// one whose return still lets the pod pass Filter; the others are the
// victims. The scheduling cycle also adds nominated pods to a copy of the
// state (AddPod) before Filter. The plugin keeps, per node, what was added
// and removed on its copy of the state, and Filter rates the node on a
// copy of the cache's state with the removed pods' GPUs released and the
// added pods' booked: the cache is never written.
//
// Left to itself the greedy return keeps pods by importance, whichever
// GPU they are on, and may free a GPU that costs more evictions than
// another would. So once the removals start, the plugin plans which pods
// to evict (victimPlan): the cheapest set that frees the GPUs of one
// placement. Filter then passes the node only while every planned victim
// is still removed, so DefaultPreemption returns every other pod and
// evicts exactly the plan.

// nodeDelta is what a cycle state's AddPod and RemovePod did to one node.
type nodeDelta struct {
	// removed holds the pods removed now; ever every pod removed since
	// the delta began, the candidates the victim plan chooses from.
	removed map[types.UID]*corev1.Pod
	ever    map[types.UID]*corev1.Pod
	// added holds pods added that were not removed before: nominated
	// pods, which hold no GPU yet.
	added map[types.UID]*corev1.Pod
	// plans is shared by the copies of the state made from this one, so
	// that the plan is made once, with the most pods removed.
	plans *planMemo
}

func newNodeDelta() *nodeDelta {
	return &nodeDelta{removed: map[types.UID]*corev1.Pod{}, ever: map[types.UID]*corev1.Pod{},
		added: map[types.UID]*corev1.Pod{}, plans: &planMemo{byCandidates: map[string]*victimPlan{}}}
}

func (d *nodeDelta) clone() *nodeDelta {
	return &nodeDelta{removed: maps.Clone(d.removed), ever: maps.Clone(d.ever), added: maps.Clone(d.added), plans: d.plans}
}

// planMemo holds the victim plans made on one node, by candidate set.
type planMemo struct {
	mu           sync.Mutex
	byCandidates map[string]*victimPlan
}

// victimPlan is the set of pods whose eviction frees the GPUs of one
// placement of the pod; empty when none does, or none is needed.
type victimPlan struct {
	victims map[types.UID]bool
	// gpus are the GPUs the victims free, for the log and the message.
	gpus []int
}

// PreFilterExtensions implements fwk.PreFilterPlugin.
func (pl *GPUShare) PreFilterExtensions() fwk.PreFilterExtensions { return pl }

// AddPod implements fwk.PreFilterExtensions: it notes on the cycle state
// that the node holds the pod (again).
func (pl *GPUShare) AddPod(_ context.Context, state fwk.CycleState, _ *corev1.Pod, add fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	c, err := readCycle(state)
	if err != nil {
		return nil
	}
	pod := add.GetPod()
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.delta(nodeInfo.Node().Name)
	if _, ok := d.removed[pod.UID]; ok {
		delete(d.removed, pod.UID)
		return nil
	}
	if _, ok := d.ever[pod.UID]; ok {
		// Removed and returned before: it holds its GPUs again.
		return nil
	}
	d.added[pod.UID] = pod
	return nil
}

// RemovePod implements fwk.PreFilterExtensions: it notes on the cycle
// state that the node no longer holds the pod.
func (pl *GPUShare) RemovePod(_ context.Context, state fwk.CycleState, _ *corev1.Pod, remove fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	c, err := readCycle(state)
	if err != nil {
		return nil
	}
	pod := remove.GetPod()
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.delta(nodeInfo.Node().Name)
	if _, ok := d.added[pod.UID]; ok {
		delete(d.added, pod.UID)
		return nil
	}
	d.removed[pod.UID] = pod
	d.ever[pod.UID] = pod
	return nil
}

// delta returns node's delta, made if need be. c.mu must be held.
func (c *cycle) delta(node string) *nodeDelta {
	if c.deltas == nil {
		c.deltas = map[string]*nodeDelta{}
		c.changed.Store(true)
	}
	d := c.deltas[node]
	if d == nil {
		d = newNodeDelta()
		c.deltas[node] = d
	}
	return d
}

// deltaOf returns a copy of node's delta, nil if the state changed
// nothing there.
func (c *cycle) deltaOf(node string) *nodeDelta {
	if !c.changed.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.deltas[node]; d != nil && (len(d.ever) > 0 || len(d.added) > 0) {
		return d.clone()
	}
	return nil
}

// held is a pod's GPU booking on a node, for the plan.
type held struct {
	pod       *corev1.Pod
	placement *alloc.Placement
}

// filterChanged is Filter on a node that AddPod or RemovePod changed: it
// rates the pod on a copy of the cache's state of the node with the
// removed pods' bookings released and the added pods' booked, and, while
// pods are removed, passes the node only if the victim plan's pods are
// among them.
func (pl *GPUShare) filterChanged(ctx context.Context, c *cycle, name string, d *nodeDelta, hold *alloc.Placement) (alloc.Rating, *alloc.Unfit, *fwk.Status) {
	logger := klog.FromContext(ctx)
	// The bookings, read before the node's state: HoldingOf takes the
	// cache's lock, which Read holds while it calls back. A pod's booking
	// includes the claims reserved for it alone: evicting it frees them.
	ever := map[types.UID]*alloc.Placement{}
	for uid := range d.ever {
		if p := pl.cache.HoldingOf(uid); p != nil && p.Node == name {
			ever[uid] = p
		}
	}
	added := make([]*corev1.Pod, 0, len(d.added))
	for _, p := range d.added {
		added = append(added, p)
	}
	slices.SortFunc(added, func(a, b *corev1.Pod) int { return cmp.Compare(a.UID, b.UID) })
	// An added pod the cache books on this node is in its state already.
	added = slices.DeleteFunc(added, func(p *corev1.Pod) bool {
		h := pl.cache.HoldingOf(p.UID)
		return h != nil && h.Node == name
	})
	var base *alloc.NodeState
	if err := pl.cache.Read(name, func(s *alloc.NodeState) { base = s.Clone() }); err != nil {
		return alloc.Rating{}, nil, outsideStatus(err)
	}
	if hold != nil {
		// The place a defragmentation plan holds for the pod is its own.
		if err := base.Release(hold); err != nil {
			logger.V(4).Info("The place held for the pod is no longer booked", "node", name, "err", err)
		}
	}
	// base: the node without any pod removed since the delta began,
	// with the added ones.
	for uid, p := range ever {
		if err := base.Release(p); err != nil {
			// The cache let the pod go meanwhile: its GPUs are free.
			logger.V(4).Info("Pod removed in a preemption dry run no longer books its GPUs", "pod", klog.KObj(d.ever[uid]), "node", name, "err", err)
			delete(ever, uid)
		}
	}
	for _, p := range added {
		pl.bookAdded(logger, base, p)
	}
	var candidates []held
	for uid, p := range ever {
		candidates = append(candidates, held{pod: d.ever[uid], placement: p})
	}
	// work: base with the pods returned since.
	work := base.Clone()
	for _, h := range candidates {
		if _, removed := d.removed[h.pod.UID]; !removed {
			_ = work.Apply(h.placement)
		}
	}
	rating, unfit := c.rater.Rate(work)
	if unfit != nil || len(d.removed) == 0 {
		return rating, unfit, nil
	}
	plan := d.plans.get(candidates, func() *victimPlan {
		pdbs, err := pl.pdbs.List(labels.Everything())
		if err != nil {
			logger.V(4).Info("Listing PodDisruptionBudgets failed; planning victims without them", "err", err)
		}
		return planVictims(c.rater, base, candidates, pdbs)
	})
	for uid := range plan.victims {
		if _, removed := d.removed[uid]; !removed {
			return alloc.Rating{}, nil, fwk.NewStatus(fwk.Unschedulable,
				fmt.Sprintf("gpushare: preemption frees GPU %s of the node, and the pod %s holds it", joinInts(plan.gpus), klog.KObj(d.ever[uid])))
		}
	}
	return rating, nil, nil
}

// bookAdded books an added pod that holds no GPU on s's node (a
// nominated pod) where the placer would put it. A pod that does not fit
// is left out.
func (pl *GPUShare) bookAdded(logger klog.Logger, s *alloc.NodeState, pod *corev1.Pod) {
	req, err := decision.Request(pl.model, pod)
	if err != nil || req == nil {
		return
	}
	placed, unfit := pl.policy.Placer().Place(s, req)
	if unfit != nil {
		logger.V(4).Info("Pod added to the node in a dry run does not fit its GPUs", "pod", klog.KObj(pod), "node", s.Node.Name, "reason", unfit)
		return
	}
	_ = s.Apply(placed)
}

// get returns the plan for candidates, made by build on first use.
func (m *planMemo) get(candidates []held, build func() *victimPlan) *victimPlan {
	uids := candidateKey(candidates)
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.byCandidates[uids]; ok {
		return p
	}
	p := build()
	m.byCandidates[uids] = p
	return p
}

// candidateKey names a set of candidates by their sorted UIDs.
func candidateKey(candidates []held) string {
	uids := make([]string, len(candidates))
	for i, h := range candidates {
		uids[i] = string(h.pod.UID)
	}
	slices.Sort(uids)
	return strings.Join(uids, ",")
}

// planVictims is alloc.PlanVictims for candidates, most important first
// as kube-scheduler's preemption returns them, with the
// PodDisruptionBudgets' violations counted as DefaultPreemption counts
// them.
func planVictims(r *alloc.Rater, base *alloc.NodeState, candidates []held, pdbs []*policyv1.PodDisruptionBudget) *victimPlan {
	candidates = slices.Clone(candidates)
	slices.SortFunc(candidates, func(a, b held) int { return moreImportant(a.pod, b.pod) })
	pods := make(map[string]*corev1.Pod, len(candidates))
	cs := make([]alloc.Candidate, len(candidates))
	for i, h := range candidates {
		key := string(h.pod.UID)
		pods[key] = h.pod
		cs[i] = alloc.Candidate{Key: key, Priority: int64(corev1helpers.PodPriority(h.pod)), Placement: h.placement}
	}
	plan := alloc.PlanVictims(r, base, cs, func(keys []string) int {
		victims := make([]*corev1.Pod, len(keys))
		for i, k := range keys {
			victims[i] = pods[k]
		}
		return pdbViolations(victims, pdbs)
	})
	out := &victimPlan{victims: make(map[types.UID]bool, len(plan.Victims)), gpus: plan.GPUs}
	for k := range plan.Victims {
		out.victims[types.UID(k)] = true
	}
	return out
}

// pdbViolations counts the victims (most important first) whose
// eviction a PodDisruptionBudget does not allow, as kube-scheduler's
// DefaultPreemption counts them: each victim a budget selects (and has not
// counted as disrupted yet) takes one of its allowed disruptions, most
// important victim first.
func pdbViolations(pods []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) int {
	if len(pdbs) == 0 || len(pods) == 0 {
		return 0
	}
	allowed := make([]int32, len(pdbs))
	selectors := make([]labels.Selector, len(pdbs))
	for i, pdb := range pdbs {
		allowed[i] = pdb.Status.DisruptionsAllowed
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil && !sel.Empty() {
			selectors[i] = sel
		}
	}
	n := 0
	for _, pod := range pods {
		violated := false
		for i, pdb := range pdbs {
			if selectors[i] == nil || pdb.Namespace != pod.Namespace || !selectors[i].Matches(labels.Set(pod.Labels)) {
				continue
			}
			if _, disrupted := pdb.Status.DisruptedPods[pod.Name]; disrupted {
				continue
			}
			allowed[i]--
			violated = violated || allowed[i] < 0
		}
		if violated {
			n++
		}
	}
	return n
}

// moreImportant orders pods as kube-scheduler's preemption returns them:
// higher priority first, then the one that started earlier; then by UID,
// so that the plan does not depend on map order.
func moreImportant(a, b *corev1.Pod) int {
	if c := cmp.Compare(corev1helpers.PodPriority(b), corev1helpers.PodPriority(a)); c != 0 {
		return c
	}
	sa, sb := a.Status.StartTime, b.Status.StartTime
	switch {
	case sa != nil && sb != nil && !sa.Equal(sb):
		if sa.Before(sb) {
			return -1
		}
		return 1
	case sa != nil && sb == nil:
		return -1
	case sa == nil && sb != nil:
		return 1
	}
	return cmp.Compare(a.UID, b.UID)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
