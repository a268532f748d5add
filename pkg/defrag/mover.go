package defrag

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/decision"
	"github.com/gpushare/gpushare/pkg/resource"
)

// Defragmentation. When a GPU pod fits no node and DefaultPreemption
// freed nothing, PostFilter asks the mover for a plan: the fewest moves
// of running pods that may move (defrag.MayMove, their disruption
// budgets) that make room for the pod on one node (alloc.PlanDefrag). The
// mover then holds, in the cache, the pod's place on that node and each
// moved pod's destination (gpucache.Hold), evicts the moved pods through
// the Eviction API, and watches: the waiting pod and the replacements the
// moved pods' controllers make take their holds when they are placed
// (PreFilter, Filter and Reserve see a pod's own holds free); what is
// still held after the timeout, or after an eviction is refused, is
// released. Every step is an event on the pods involved.

// Event reasons of defragmentation.
const (
	reasonDefragmenting = "Defragmenting"
	reasonMoved         = "MovedByDefrag"
	reasonDefragmented  = "Defragmented"
	reasonDefragFailed  = "DefragFailed"
)

// retryAfter is how long a waiting pod goes without a new plan after one
// was looked for in vain; shapeRetryAfter how long any pod of the same
// request does. Looking costs a pass over every pod and a plan per
// candidate node: a scheduler turning away a stream of pods of one shape
// must not look for each.
const (
	retryAfter      = 30 * time.Second
	shapeRetryAfter = 10 * time.Second
)

// searchesPerPlan bounds the searches per minute, over all pods, to this
// many per plan plansPerMinute allows.
const searchesPerPlan = 10

// noPlan starts the note of a search that found no plan.
const noPlan = "no plan"

// Config is what a Mover works with: its profile's defragmentation
// args, the scheduler's clients, listers and cache, and the profile's
// resource model.
type Config struct {
	Args       v1alpha1.DefragArgs
	Client     kubernetes.Interface
	Recorder   events.EventRecorder
	Cache      *gpucache.Cache
	Model      *resource.Model
	Pods       corelisters.PodLister
	Nodes      corelisters.NodeLister
	Namespaces corelisters.NamespaceLister
	PDBs       policylisters.PodDisruptionBudgetLister
	Metrics    *Metrics
	// Seed breaks ties between plans.
	Seed uint64
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Activate moves pods to the scheduling queue's active queue
	// (kube-scheduler's Handle.Activate); nil does nothing.
	Activate func(pods map[string]*corev1.Pod)
}

// Mover makes and follows the defragmentation plans of one scheduler
// profile: the profile's PostFilter asks it for a plan (Consider), and
// a Loop follows the plans under way (Follow).
type Mover struct {
	cfg Config

	mu sync.Mutex
	// plans holds the plans under way, by waiting pod.
	plans map[types.UID]*movePlan
	// tried holds when a plan was last looked for in vain, per pod, and
	// triedShape per request (shapeOf).
	tried      map[types.UID]time.Time
	triedShape map[string]time.Time
	// starts are when the plans of the last minute started, searches
	// when the last minute's searches began.
	starts, searches []time.Time
}

// NewMover returns a Mover with no plan under way.
func NewMover(cfg Config) *Mover {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	return &Mover{cfg: cfg, plans: map[types.UID]*movePlan{}, tried: map[types.UID]time.Time{}, triedShape: map[string]time.Time{}}
}

// movePlan is a plan under way.
type movePlan struct {
	id       string
	waiting  *corev1.Pod
	node     string
	gpus     []int
	moves    []plannedMove
	deadline time.Time
}

type plannedMove struct {
	pod    *corev1.Pod
	to     string
	toGPUs []int
}

// Consider is PostFilter's call for a GPU pod that fits no node: it
// returns a note for the pod's FailedScheduling event, "" for none.
func (m *Mover) Consider(ctx context.Context, pod *corev1.Pod, req *alloc.PodRequest, placer *alloc.Placer) string {
	logger := klog.FromContext(ctx)
	now := m.cfg.Now()
	m.mu.Lock()
	if p := m.plans[pod.UID]; p != nil {
		m.mu.Unlock()
		return fmt.Sprintf("defragmentation: waiting for %d moved pod(s) to leave node %s", len(p.moves), p.node)
	}
	shape := shapeOf(req)
	if t, ok := m.tried[pod.UID]; ok && now.Sub(t) < retryAfter {
		m.mu.Unlock()
		return ""
	}
	if t, ok := m.triedShape[shape]; ok && now.Sub(t) < shapeRetryAfter {
		m.mu.Unlock()
		return ""
	}
	old := func(t time.Time) bool { return now.Sub(t) >= time.Minute }
	m.starts = slices.DeleteFunc(m.starts, old)
	m.searches = slices.DeleteFunc(m.searches, old)
	if len(m.starts) >= m.cfg.Args.PlansPerMinute {
		m.mu.Unlock()
		return fmt.Sprintf("defragmentation: %d plans started in the last minute, the most allowed", len(m.starts))
	}
	if len(m.searches) >= searchesPerPlan*m.cfg.Args.PlansPerMinute {
		m.mu.Unlock()
		return ""
	}
	m.searches = append(m.searches, now)
	m.tried[pod.UID] = now
	m.mu.Unlock()

	plan, states, movedPods, note := m.plan(pod, req, placer)
	if plan == nil {
		if strings.HasPrefix(note, noPlan) {
			// The costly search found nothing: not again for this
			// shape for a while.
			m.mu.Lock()
			m.triedShape[shape] = now
			m.mu.Unlock()
		}
		m.cfg.Metrics.Plans.WithLabelValues("none").Inc()
		logger.V(3).Info("No defragmentation plan", "pod", klog.KObj(pod), "reason", note)
		return "defragmentation: " + note
	}
	p := &movePlan{id: "defrag/" + string(pod.UID), waiting: pod, node: states[plan.Target].Node.Name,
		gpus: gpuIndexes(plan.Placement), deadline: now.Add(m.cfg.Args.Timeout.Duration)}
	for i, mv := range plan.Moves {
		p.moves = append(p.moves, plannedMove{pod: movedPods[i], to: states[mv.To].Node.Name, toGPUs: gpuIndexes(mv.Placement)})
	}
	if err := m.hold(p, plan, states[plan.Target], movedPods); err != nil {
		m.cfg.Cache.DropPlan(p.id)
		m.cfg.Metrics.Plans.WithLabelValues("changed").Inc()
		logger.V(2).Info("Defragmentation plan dropped: the cluster changed", "pod", klog.KObj(pod), "err", err)
		return "defragmentation: the plan no longer fits: " + err.Error()
	}
	m.mu.Lock()
	m.plans[pod.UID] = p
	m.starts = append(m.starts, now)
	delete(m.tried, pod.UID)
	m.mu.Unlock()
	m.cfg.Metrics.Plans.WithLabelValues("started").Inc()
	what := p.describe()
	logger.Info("Defragmenting", "pod", klog.KObj(pod), "node", p.node, "gpus", joinInts(p.gpus), "moves", what)
	m.cfg.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, reasonDefragmenting, "Defragment",
		"Moving %d pod(s) to make room on node %s (GPU %s): %s", len(p.moves), p.node, joinInts(p.gpus), what)
	go m.evict(klog.NewContext(context.WithoutCancel(ctx), logger), p)
	return fmt.Sprintf("defragmentation: moving %s", what)
}

// plan looks for a plan for pod; with none, a note says why.
func (m *Mover) plan(pod *corev1.Pod, req *alloc.PodRequest, placer *alloc.Placer) (*alloc.DefragPlan, []*alloc.NodeState, []*corev1.Pod, string) {
	states := m.cfg.Cache.Snapshot()
	index := make(map[string]int, len(states))
	for i, s := range states {
		index[s.Node.Name] = i
	}
	pods, err := m.cfg.Pods.List(labels.Everything())
	if err != nil {
		return nil, nil, nil, "listing pods: " + err.Error()
	}
	var pdbs []policyv1.PodDisruptionBudget
	if list, err := m.cfg.PDBs.List(labels.Everything()); err == nil {
		for _, b := range list {
			pdbs = append(pdbs, *b)
		}
	}
	waiting := Priority(pod)
	// A pod a plan under way moves is not planned again.
	moving := map[types.UID]bool{}
	m.mu.Lock()
	for _, p := range m.plans {
		for _, mv := range p.moves {
			moving[mv.pod.UID] = true
		}
	}
	m.mu.Unlock()
	var movable []alloc.Movable
	byKey := map[string]*corev1.Pod{}
	var why Refusals
	for _, p := range pods {
		placement, assumed := m.cfg.Cache.Holding(p.UID)
		i, ok := 0, false
		if placement != nil {
			i, ok = index[placement.Node]
		}
		if !ok || assumed || p.UID == pod.UID || moving[p.UID] {
			continue
		}
		req, err := decision.Request(m.cfg.Model, p)
		if err != nil || req == nil {
			continue
		}
		var ns *corev1.Namespace
		if n, err := m.cfg.Namespaces.Get(p.Namespace); err == nil {
			ns = n
		}
		if err := Check(p, ns, waiting, pdbs); err != nil {
			why.Add(err)
			continue
		}
		key := p.Namespace + "/" + p.Name
		byKey[key] = p
		movable = append(movable, alloc.Movable{Key: key, Node: i, Request: req, Placement: placement, Fits: m.fits(p, states)})
	}
	if len(movable) == 0 {
		return nil, nil, nil, "no pod may move" + why.String()
	}
	plan := placer.PlanDefrag(states, req, movable, alloc.DefragBudget{MaxMoves: m.cfg.Args.MaxMoves, MaxTargets: m.cfg.Args.MaxTargets,
		Fits: m.fits(pod, states)}, m.cfg.Seed)
	if plan == nil {
		return nil, nil, nil, fmt.Sprintf("%s of at most %d moves among the %d pods that may move", noPlan, m.cfg.Args.MaxMoves, len(movable))
	}
	moved := make([]*corev1.Pod, len(plan.Moves))
	for i, mv := range plan.Moves {
		moved[i] = byKey[mv.Key]
	}
	if err := Budgets(moved, pdbs); err != nil {
		return nil, nil, nil, err.Error()
	}
	return plan, states, moved, ""
}

// fits returns which of states' nodes pod may run on by its node
// selector, affinity and tolerations (decision.Eligible): a plan makes
// room only where the waiting pod may run, and moves pods only where
// they may. A node the lister does not hold is not one.
//
// Each node is judged when the plan first asks about it: a plan asks of
// few nodes, and there are many movable pods.
func (m *Mover) fits(pod *corev1.Pod, states []*alloc.NodeState) func(int) bool {
	var affinity nodeaffinity.RequiredNodeAffinity
	const yes, no = 1, 2
	var judged map[int]uint8
	return func(i int) bool {
		if i < 0 || i >= len(states) {
			return false
		}
		if judged == nil {
			affinity, judged = nodeaffinity.GetRequiredNodeAffinity(pod), map[int]uint8{}
		}
		if judged[i] == 0 {
			judged[i] = no
			if n, err := m.cfg.Nodes.Get(states[i].Node.Name); err == nil && decision.EligibleBy(affinity, pod, n) {
				judged[i] = yes
			}
		}
		return judged[i] == yes
	}
}

// hold holds the plan's places in the cache: on the target, what its
// GPUs have free now, joined by what the moved pods hold there as they
// end; each destination for the moved pod's controller.
func (m *Mover) hold(p *movePlan, plan *alloc.DefragPlan, target *alloc.NodeState, moved []*corev1.Pod) error {
	free := &alloc.Placement{Node: p.node}
	for _, b := range plan.Placement.Booked {
		f := target.Free(b.GPU)
		u := alloc.Usage{MemoryMiB: max(0, min(b.MemoryMiB, f.MemoryMiB)), Compute: max(0, min(b.Compute, f.Compute))}
		if u != (alloc.Usage{}) {
			free.Booked = append(free.Booked, alloc.Assignment{GPU: b.GPU, UUID: b.UUID, Usage: u})
		}
	}
	joins := make([]types.UID, len(moved))
	for i, pod := range moved {
		joins[i] = pod.UID
	}
	if err := m.cfg.Cache.Hold(p.id, p.targetKey(), gpucache.HoldFor{Pod: p.waiting.UID}, free, joins); err != nil {
		return err
	}
	for i, mv := range plan.Moves {
		owner := metav1.GetControllerOf(moved[i])
		if owner == nil {
			return fmt.Errorf("pod %s has no controller", mv.Key)
		}
		if err := m.cfg.Cache.Hold(p.id, p.moveKey(i), gpucache.HoldFor{Owner: owner.UID, Namespace: moved[i].Namespace}, mv.Placement, nil); err != nil {
			return err
		}
	}
	return nil
}

// evict evicts the plan's pods one by one; a refusal gives the plan up.
func (m *Mover) evict(ctx context.Context, p *movePlan) {
	logger := klog.FromContext(ctx)
	for _, mv := range p.moves {
		e := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: mv.pod.Name, Namespace: mv.pod.Namespace},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &mv.pod.UID}}}
		err := m.cfg.Client.PolicyV1().Evictions(mv.pod.Namespace).Evict(ctx, e)
		if err != nil && !apierrors.IsNotFound(err) {
			logger.Info("Eviction refused; giving the defragmentation plan up", "pod", klog.KObj(p.waiting), "moved", klog.KObj(mv.pod), "err", err)
			m.giveUp(p, "failed", fmt.Sprintf("the eviction of %s was refused (%v)", klog.KObj(mv.pod), err))
			return
		}
		m.cfg.Metrics.Moved.Inc()
		m.cfg.Recorder.Eventf(mv.pod, p.waiting, corev1.EventTypeNormal, reasonMoved, "Evict",
			"Evicted to make room for %s on node %s; its replacement has room held on node %s (GPU %s)",
			klog.KObj(p.waiting), p.node, mv.to, joinInts(mv.toGPUs))
	}
}

// giveUp releases what plan p still holds and says why on its pod.
func (m *Mover) giveUp(p *movePlan, result, why string) {
	m.mu.Lock()
	if m.plans[p.waiting.UID] != p {
		m.mu.Unlock()
		return
	}
	delete(m.plans, p.waiting.UID)
	m.tried[p.waiting.UID] = m.cfg.Now()
	m.mu.Unlock()
	released := m.cfg.Cache.DropPlan(p.id)
	m.requeue(p)
	m.cfg.Metrics.Plans.WithLabelValues(result).Inc()
	m.cfg.Recorder.Eventf(p.waiting, nil, corev1.EventTypeWarning, reasonDefragFailed, "Defragment",
		"Gave up making room on node %s: %s; released %d held place(s)", p.node, why, len(released))
}

// requeue asks the scheduler to try again at once the pods plan p held
// room for, its holds released: the waiting pod, and the pending pods of
// the moved pods' controllers (their replacements). No cluster event
// follows a release, and they would otherwise wait for the queue's
// periodic flush of unschedulable pods (5 minutes).
func (m *Mover) requeue(p *movePlan) {
	if m.cfg.Activate == nil {
		return
	}
	pods := map[string]*corev1.Pod{}
	if cur, err := m.cfg.Pods.Pods(p.waiting.Namespace).Get(p.waiting.Name); err == nil && cur.Spec.NodeName == "" {
		pods[cur.Namespace+"/"+cur.Name] = cur
	}
	for _, mv := range p.moves {
		owner := metav1.GetControllerOf(mv.pod)
		if owner == nil {
			continue
		}
		list, err := m.cfg.Pods.Pods(mv.pod.Namespace).List(labels.Everything())
		if err != nil {
			continue
		}
		for _, q := range list {
			if o := metav1.GetControllerOf(q); q.Spec.NodeName == "" && o != nil && o.UID == owner.UID {
				pods[q.Namespace+"/"+q.Name] = q
			}
		}
	}
	if len(pods) > 0 {
		m.cfg.Activate(pods)
	}
}

// Loop follows the plans of every Mover added to it, once a tick, until
// its Run's context ends. The scheduler's main runs one; each profile
// that moves pods adds its Mover.
type Loop struct {
	mu     sync.Mutex
	movers []*Mover
}

// Add makes l follow m's plans.
func (l *Loop) Add(m *Mover) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.movers = append(l.movers, m)
}

// Run follows the movers' plans every tick until ctx ends.
func (l *Loop) Run(ctx context.Context, every time.Duration) {
	wait.UntilWithContext(ctx, func(context.Context) {
		l.mu.Lock()
		movers := slices.Clone(l.movers)
		l.mu.Unlock()
		for _, m := range movers {
			m.Follow()
		}
	}, every)
}

// Follow ends each plan whose holds were all taken, and gives up those
// past their deadline or whose pod is gone.
func (m *Mover) Follow() {
	m.mu.Lock()
	plans := make([]*movePlan, 0, len(m.plans))
	for _, p := range m.plans {
		plans = append(plans, p)
	}
	for uid, t := range m.tried {
		if m.cfg.Now().Sub(t) >= retryAfter {
			delete(m.tried, uid)
		}
	}
	for k, t := range m.triedShape {
		if m.cfg.Now().Sub(t) >= shapeRetryAfter {
			delete(m.triedShape, k)
		}
	}
	m.mu.Unlock()
	for _, p := range plans {
		left := m.cfg.Cache.PlanHolds(p.id)
		if len(left) == 0 {
			m.done(p)
			continue
		}
		if cur, err := m.cfg.Pods.Pods(p.waiting.Namespace).Get(p.waiting.Name); err != nil || cur.UID != p.waiting.UID {
			m.giveUp(p, "gone", "the pod is gone")
			continue
		}
		if m.cfg.Now().After(p.deadline) {
			m.giveUp(p, "timed_out", fmt.Sprintf("%s passed waiting for %s", m.cfg.Args.Timeout.Duration, m.waitingFor(p, left)))
		}
	}
}

// targetKey and moveKey are the keys of the plan's holds: the waiting
// pod's, and the i-th moved pod's replacement's.
func (p *movePlan) targetKey() string    { return p.id + "/target" }
func (p *movePlan) moveKey(i int) string { return fmt.Sprintf("%s/move-%d", p.id, i) }

// waitingFor names what the holds left wait for.
func (m *Mover) waitingFor(p *movePlan, left []string) string {
	var out []string
	for i, mv := range p.moves {
		if slices.Contains(left, p.moveKey(i)) {
			out = append(out, fmt.Sprintf("the replacement of %s", klog.KObj(mv.pod)))
		}
	}
	if slices.Contains(left, p.targetKey()) {
		out = append(out, "the pod itself")
	}
	return strings.Join(out, ", ")
}

func (m *Mover) done(p *movePlan) {
	m.mu.Lock()
	if m.plans[p.waiting.UID] != p {
		m.mu.Unlock()
		return
	}
	delete(m.plans, p.waiting.UID)
	m.mu.Unlock()
	m.cfg.Metrics.Plans.WithLabelValues("done").Inc()
	m.cfg.Metrics.Freed.Add(float64(len(p.gpus)))
	m.cfg.Recorder.Eventf(p.waiting, nil, corev1.EventTypeNormal, reasonDefragmented, "Defragment",
		"Placed on node %s (GPU %s) after moving %d pod(s)", p.node, joinInts(p.gpus), len(p.moves))
}

// shapeOf is what a request asks, less the pod's name.
func shapeOf(r *alloc.PodRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d", r.CPUMilli, r.MemoryMiB)
	for _, c := range r.Containers {
		fmt.Fprintf(&b, "|%s %d %d %d %d %d %v %v %q", c.Name, c.Kind, c.MemoryMiB, c.MemoryPercent, c.Compute, c.Count, c.Exclusive, c.MPS, c.Models)
		if c.Filter != nil {
			fmt.Fprintf(&b, " %+v", *c.Filter)
		}
	}
	return b.String()
}

// describe names the plan's moves.
func (p *movePlan) describe() string {
	parts := make([]string, len(p.moves))
	for i, mv := range p.moves {
		parts[i] = fmt.Sprintf("%s to node %s (GPU %s)", klog.KObj(mv.pod), mv.to, joinInts(mv.toGPUs))
	}
	return strings.Join(parts, ", ")
}

func gpuIndexes(p *alloc.Placement) []int {
	out := make([]int, 0, len(p.Booked))
	for _, b := range p.Booked {
		out = append(out, b.GPU)
	}
	return out
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
