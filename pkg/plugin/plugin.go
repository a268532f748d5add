package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	policylisters "k8s.io/client-go/listers/policy/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/binding"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/decision"
	"github.com/gpushare/gpushare/pkg/defrag"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
	"github.com/gpushare/gpushare/pkg/workload"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GPUShare"

const stateKey fwk.StateKey = Name

// GPUShare is the plugin.
type GPUShare struct {
	handle  fwk.Handle
	model   *resource.Model
	policy  *workload.Policy
	cache   *gpucache.Cache
	metrics *metrics
	seed    uint64
	// synced reports whether the cache has taken in the informers'
	// first lists; PreFilter waits for it once.
	synced func() bool
	// pdbs lists the PodDisruptionBudgets, which preemption's victim
	// plan spares where it can.
	pdbs policylisters.PodDisruptionBudgetLister
	// claims lists the ResourceClaims, for pods that ask gpushare's DRA
	// devices through them (claimRequest).
	claims resourcelisters.ResourceClaimLister
	// learnOnce learns the workload from the cluster's pods on the
	// first PreFilter: a restarted scheduler starts from what runs.
	learnOnce sync.Once
	// mover makes room by moving pods (GPUShareArgs.Defrag); nil when
	// defragmentation is off.
	mover *defrag.Mover
	// sparing is set while the policy's Placer keeps idle GPUs spare
	// (GPUShareArgs.Workload.KeepIdleGPUs): when it stops, the pods it
	// kept waiting are retried (noteSparing).
	sparing atomic.Bool
	// retries holds, per pod kept waiting, the timer that retries it
	// once it has waited the policy's KeepFor (retryWhenKeptTooLong).
	retriesMu sync.Mutex
	retries   map[types.UID]*time.Timer
}

var (
	_ fwk.PreFilterPlugin     = (*GPUShare)(nil)
	_ fwk.PreFilterExtensions = (*GPUShare)(nil)
	_ fwk.FilterPlugin        = (*GPUShare)(nil)
	_ fwk.PostFilterPlugin    = (*GPUShare)(nil)
	_ fwk.PreScorePlugin      = (*GPUShare)(nil)
	_ fwk.ScorePlugin         = (*GPUShare)(nil)
	_ fwk.ReservePlugin       = (*GPUShare)(nil)
	_ fwk.BindPlugin          = (*GPUShare)(nil)
	_ fwk.PostBindPlugin      = (*GPUShare)(nil)
	_ fwk.EnqueueExtensions   = (*GPUShare)(nil)
)

// New returns the plugin factory for app.WithPlugin: the plugins it
// builds, one per profile that runs GPUShare, share s.
func New(s *Shared) frameworkruntime.PluginFactory {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		args, err := decodeArgs(obj)
		if err != nil {
			return nil, err
		}
		model, err := resource.New(args.ResourceModel)
		if err != nil {
			return nil, err
		}
		policy, err := decision.Policy(args, model)
		if err != nil {
			return nil, fmt.Errorf("%s args: %w", Name, err)
		}
		logger := klog.FromContext(ctx).WithName(Name)
		if err := s.join(ctx, logger, h, model); err != nil {
			return nil, err
		}
		// The policy weighs model-bound pods against the cluster's GPUs
		// per model, as the shared cache counts them.
		policy.Follow(s.cache)
		pl := &GPUShare{handle: h, model: model, policy: policy, cache: s.cache, synced: s.synced, metrics: s.metrics, seed: args.Seed,
			pdbs:   h.SharedInformerFactory().Policy().V1().PodDisruptionBudgets().Lister(),
			claims: h.SharedInformerFactory().Resource().V1().ResourceClaims().Lister()}
		// Every profile's gauge shows, 0 until its policy keeps GPUs.
		pl.metrics.kept.WithLabelValues(h.ProfileName()).Set(0)
		if args.DefragOn() {
			f := h.SharedInformerFactory()
			pl.mover = defrag.NewMover(defrag.Config{Args: *args.Defrag, Client: h.ClientSet(), Recorder: h.EventRecorder(), Cache: s.cache, Model: model,
				Pods: f.Core().V1().Pods().Lister(), Nodes: f.Core().V1().Nodes().Lister(), Namespaces: f.Core().V1().Namespaces().Lister(), PDBs: pl.pdbs,
				Metrics: s.metrics.defrag, Seed: args.Seed,
				Activate: func(pods map[string]*corev1.Pod) { h.Activate(logger, pods) }})
			s.Movers.Add(pl.mover)
		}
		logger.Info("GPUShare plugin ready", "profile", h.ProfileName(), "nodePolicy", args.NodePolicy, "gpuPolicy", args.GPUPolicy,
			"learnsWorkload", policy.Learns(), "keepIdleGPUs", policy.KeepsIdle(), "resources", model.Names(), "defrag", args.DefragOn())
		return pl, nil
	}
}

func decodeArgs(obj runtime.Object) (*v1alpha1.GPUShareArgs, error) {
	var raw []byte
	if obj != nil {
		u, ok := obj.(*runtime.Unknown)
		if !ok {
			return nil, fmt.Errorf("%s args: want %s, got %T", Name, v1alpha1.KindGPUShareArgs, obj)
		}
		raw = u.Raw
	}
	args, err := v1alpha1.LoadArgs(raw)
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	return args, nil
}

// activatePending moves every pending pod that asks for GPUs back to the
// scheduling queue: pods turned away from node while its daemon was down
// would otherwise wait for an unrelated event. The queue is shared by all
// profiles, so one handle's Activate reaches them all.
func activatePending(ctx context.Context, h fwk.Handle, node string) {
	n := retryPending(ctx, h)
	klog.FromContext(ctx).V(2).Info("Retried pending pods after a node daemon came back", "node", node, "pods", n)
}

// retryPending moves every pending pod back to the scheduling queue, and
// returns how many.
func retryPending(ctx context.Context, h fwk.Handle) int {
	pods, err := h.SharedInformerFactory().Core().V1().Pods().Lister().List(labels.Everything())
	if err != nil {
		return 0
	}
	pending := map[string]*corev1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
			pending[p.Namespace+"/"+p.Name] = p
		}
	}
	if len(pending) > 0 {
		h.Activate(klog.FromContext(ctx), pending)
	}
	return len(pending)
}

// noteSparing follows whether placer keeps idle GPUs spare. When it stops,
// the pods it kept off them are retried: no cluster event would move them
// back to the queue before kube-scheduler's periodic retry.
func (pl *GPUShare) noteSparing(ctx context.Context, placer *alloc.Placer) {
	if sp := placer.Spare(); sp != nil {
		if !pl.sparing.Load() && !pl.sparing.Swap(true) {
			pl.metrics.kept.WithLabelValues(pl.handle.ProfileName()).Set(1)
			klog.FromContext(ctx).V(2).Info("Keeping idle GPUs spare for whole-GPU pods", "wholeShareOfDemand", sp.Whole)
		}
		return
	}
	if pl.sparing.Load() && pl.sparing.Swap(false) {
		pl.metrics.kept.WithLabelValues(pl.handle.ProfileName()).Set(0)
		n := retryPending(ctx, pl.handle)
		klog.FromContext(ctx).V(2).Info("Retried pending pods: idle GPUs are no longer kept spare", "pods", n)
	}
}

// retryWhenKeptTooLong retries pod, turned away while idle GPUs were
// kept, once it has waited the policy's KeepFor since its creation: it
// is then placed without keeping them (decision.Kept). Nothing else
// would move it back to the queue on a quiet cluster before
// kube-scheduler's periodic retry, minutes later.
func (pl *GPUShare) retryWhenKeptTooLong(ctx context.Context, pod *corev1.Pod) {
	pl.retriesMu.Lock()
	defer pl.retriesMu.Unlock()
	if _, ok := pl.retries[pod.UID]; ok {
		return
	}
	if pl.retries == nil {
		pl.retries = map[types.UID]*time.Timer{}
	}
	// A little past the bound, so that the retry finds it passed.
	wait := max(time.Until(pod.CreationTimestamp.Add(pl.policy.KeepFor())), 0) + 100*time.Millisecond
	logger := klog.FromContext(ctx)
	pl.retries[pod.UID] = time.AfterFunc(wait, func() {
		pl.retriesMu.Lock()
		delete(pl.retries, pod.UID)
		pl.retriesMu.Unlock()
		// Placed or gone since: nothing to retry.
		now, err := pl.handle.SharedInformerFactory().Core().V1().Pods().Lister().Pods(pod.Namespace).Get(pod.Name)
		if err != nil || now.UID != pod.UID || now.Spec.NodeName != "" {
			return
		}
		logger.V(2).Info("Retrying a pod kept from idle GPUs for as long as workload.keepIdleFor", "pod", klog.KObj(now))
		pl.handle.Activate(logger, map[string]*corev1.Pod{now.Namespace + "/" + now.Name: now})
	})
}

// keptGangPod counts the demand of pod, of a PodGroup, as waiting while
// idle GPUs are kept, and returns the Placer for the room read again
// with it. A PodGroup's pod that fits nowhere gets no PostFilter, which
// notes the other pods' waits: kube-scheduler fails the group's cycle
// instead. Uncounted, a gang of shares would not weigh against the
// keeping, and on a quiet cluster would wait out workload.keepIdleFor
// beside idle GPUs that nothing else asks for. Placed, it stops waiting
// (the cache's Assume).
func (pl *GPUShare) keptGangPod(pod *corev1.Pod, req *alloc.PodRequest) (*alloc.Placer, error) {
	pl.cache.Wait(pod.UID, req)
	pl.policy.Reread()
	return decision.Placer(pl.policy, pod)
}

// noteLargestGPU tells the resource model the largest GPU, so that a
// request no GPU could hold is rejected with that message.
func (pl *GPUShare) noteLargestGPU() {
	pl.model.SetLargestGPU(pl.cache.LargestGPU())
}

// Name implements fwk.Plugin.
func (pl *GPUShare) Name() string { return Name }

// cycle is the plugin's state for one scheduling cycle.
type cycle struct {
	req *alloc.PodRequest
	// placer is the policy's Placer for this cycle: Reserve places with
	// the one Filter rated with.
	placer *alloc.Placer
	// rater rates the pod on each node Filter is called for.
	rater *alloc.Rater
	// start is when PreFilter began, for the decision latency.
	start time.Time
	// kubelet is what a node's kubelet counts of the pod (kubeletAsks).
	kubelet []ask
	// claims is set when the GPUs are asked through ResourceClaims:
	// DynamicResources allocates them and DefaultBinder binds the pod,
	// with no record (claimRequest).
	claims bool
	// holds are the places a defragmentation plan holds for the pod, at
	// most one per node: Filter sees them free, Reserve takes one.
	holds []gpucache.Held

	// ratings holds the rating of each node that passed Filter.
	ratings *ratings

	mu     sync.Mutex
	unfits []*alloc.Unfit
	// chosen is the placement Reserve booked; recorded is set once Bind
	// has bound the pod with its record.
	chosen   *alloc.Placement
	recorded bool
	// deltas holds, per node, the pods AddPod and RemovePod added to and
	// removed from this state (preemption's dry runs, nominated pods);
	// changed is set once there are any, so that Filter in a plain cycle
	// takes no lock for them.
	deltas  map[string]*nodeDelta
	changed atomic.Bool
}

// Clone implements fwk.StateData: kube-scheduler clones the state for
// preemption's dry runs and for nominated pods, and what AddPod, RemovePod
// and Filter write on a copy stays there. The request, the rater and the
// kubelet's asks are read-only and shared.
func (c *cycle) Clone() fwk.StateData {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &cycle{req: c.req, placer: c.placer, rater: c.rater, start: c.start, kubelet: c.kubelet, claims: c.claims, holds: c.holds, ratings: c.ratings.clone(),
		unfits: slices.Clone(c.unfits), chosen: c.chosen, recorded: c.recorded}
	if c.deltas != nil {
		out.deltas = make(map[string]*nodeDelta, len(c.deltas))
		for n, d := range c.deltas {
			out.deltas[n] = d.clone()
		}
		out.changed.Store(true)
	}
	return out
}

// readCycle returns the cycle PreFilter wrote. It wraps fwk.ErrNotFound
// when PreFilter wrote none: the pod asks for no GPU (or was rejected),
// and the plugin then has nothing to say about it.
func readCycle(state fwk.CycleState) (*cycle, error) {
	d, err := state.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("%s: reading cycle state: %w", Name, err)
	}
	c, ok := d.(*cycle)
	if !ok {
		return nil, fmt.Errorf("%s: cycle state has type %T", Name, d)
	}
	return c, nil
}

// PreFilter implements fwk.PreFilterPlugin.
func (pl *GPUShare) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	start := time.Now()
	// kube-scheduler waits for its informers to sync, not for their
	// handlers to have fed the cache: the first decisions would see part
	// of the cluster and turn pods away for good.
	if !gpucache.WaitSynced(ctx, pl.synced) {
		return nil, fwk.AsStatus(fmt.Errorf("the GPU cache did not sync: %w", ctx.Err()))
	}
	pl.noteLargestGPU()
	req, err := decision.Request(pl.model, pod)
	if err != nil {
		pl.metrics.observe(resultInvalid, start)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	claims := false
	if req != nil && len(pod.Spec.ResourceClaims) > 0 {
		// DynamicResources would allocate the claims from what the
		// node's slices offer, which does not yet count this pod's own
		// shares: the two could land on one GPU past its memory, and
		// the node would refuse the claims with the pod bound.
		if claim.PodAsks(pod, pl.claims) {
			pl.metrics.observe(resultInvalid, start)
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, decision.ReasonMixedRequest)
		}
	}
	if why := pl.chargeShort(pod, req); why != "" {
		pl.metrics.observe(resultInvalid, start)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
	}
	if req == nil && len(pod.Spec.ResourceClaims) > 0 {
		base, _ := pl.model.PodRequest(pod)
		if req, err = pl.claimRequest(pod, base); err != nil {
			// DynamicResources places what the policy cannot.
			klog.FromContext(ctx).V(3).Info("Claims left to DynamicResources", "pod", klog.KObj(pod), "reason", err)
			req = nil
		}
		claims = req != nil
	}
	if req == nil {
		return pl.preFilterPlain(state, pod)
	}
	pl.learnOnce.Do(func() { pl.learnCluster(ctx) })
	placer, err := decision.Placer(pl.policy, pod)
	if err != nil {
		pl.metrics.observe(resultInvalid, start)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	gang := placer.Spare() != nil && pod.Spec.SchedulingGroup != nil
	if gang {
		if placer, err = pl.keptGangPod(pod, req); err != nil {
			pl.metrics.observe(resultInvalid, start)
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
		}
	}
	pl.noteSparing(ctx, placer)
	placer = decision.Kept(pl.policy, placer, pod, time.Now())
	if gang && placer.Spare() != nil {
		// Still kept from it: retried once it has waited keepIdleFor.
		pl.retryWhenKeptTooLong(ctx, pod)
	}
	if claims {
		// DynamicResources gives the claims the first devices that fit:
		// rate each node, and assume, by that placement.
		placer = placer.FirstFit()
	}
	var holds []gpucache.Held
	if !claims {
		var owner types.UID
		if o := metav1.GetControllerOf(pod); o != nil {
			owner = o.UID
		}
		holds = pl.cache.HeldFor(pod.UID, owner, pod.Namespace)
	}
	kubelet := pl.kubeletAsks(pod)
	state.Write(stateKey, &cycle{req: req, placer: placer, rater: placer.NewRater(req, pl.seed), start: start, claims: claims, holds: holds,
		kubelet: kubelet, ratings: newRatings(feasibleNodes(len(nodes)))})
	leaveToGPUShare(state, kubelet)
	return nil, nil
}

// Filter implements fwk.FilterPlugin.
func (pl *GPUShare) Filter(ctx context.Context, state fwk.CycleState, _ *corev1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	c, err := readCycle(state)
	if errors.Is(err, fwk.ErrNotFound) {
		if pc := readPlain(state); pc != nil {
			pl.filterPlain(pc, nodeInfo.Node().Name)
			return nil
		}
	}
	if err != nil {
		return fwk.AsStatus(err)
	}
	name := nodeInfo.Node().Name
	if reason := kubeletShort(c.kubelet, nodeInfo); reason != "" {
		return fwk.NewStatus(fwk.Unschedulable, Name+": "+reason)
	}
	var (
		rating alloc.Rating
		unfit  *alloc.Unfit
	)
	if d, h := c.deltaOf(name), c.heldOn(name); d != nil || h != nil {
		if d == nil {
			d = newNodeDelta()
		}
		var s *fwk.Status
		rating, unfit, s = pl.filterChanged(ctx, c, name, d, h)
		if s != nil {
			return s
		}
	} else if err := pl.cache.ReadNode(nodeInfo.Node(), func(s *alloc.NodeState, sum *alloc.Summary) {
		rating, unfit = c.rater.RateSummary(s, sum)
	}); err != nil {
		return outsideStatus(err)
	}
	if unfit != nil {
		c.mu.Lock()
		c.unfits = append(c.unfits, unfit)
		c.mu.Unlock()
		if !unfit.Resolvable() {
			// Preemption would try the node in vain.
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, decision.Reason(unfit))
		}
		return fwk.NewStatus(fwk.Unschedulable, decision.Reason(unfit))
	}
	c.ratings.put(name, rating)
	return nil
}

// feasibleNodes is how many nodes kube-scheduler looks for among n
// with the default percentageOfNodesToScore (50% less 1% per 125 nodes,
// at least 5% and 100 nodes), and a few more, for the Filter calls in
// flight when it stops: a cycle's ratings have that many slots.
func feasibleNodes(n int) int {
	const minFeasible, inFlight = 100, 32
	if n <= minFeasible {
		return n
	}
	percent := max(50-n/125, 5)
	return max(n*percent/100, minFeasible) + inFlight
}

// outsideStatus is Filter's status for a node the cache refused with err.
func outsideStatus(err error) *fwk.Status {
	reason, resolvable := decision.OutsideReason(err)
	if resolvable {
		return fwk.NewStatus(fwk.Unschedulable, reason)
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
}

// PostFilter implements fwk.PostFilterPlugin: it preempts nothing, but
// adds the numbers to the pod's FailedScheduling event, e.g. "largest free
// share on any GPU is 3000 MiB, pod needs 3500 MiB"; with defragmentation
// on, it asks the mover to make room (defrag.Mover) and says what it does.
func (pl *GPUShare) PostFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	c, err := readCycle(state)
	if err != nil {
		// PreFilter rejected or skipped the pod: nothing to add.
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	pl.metrics.observe(resultUnschedulable, c.start)
	// Its GPU demand waits: what keeping idle GPUs spare weighs. Turned
	// away while they were kept, it may end the keeping: the policy reads
	// the room again at once, and the pods kept are retried if it ends.
	pl.cache.Wait(pod.UID, c.req)
	if c.placer.Spare() != nil {
		pl.policy.Reread()
		pl.noteSparing(ctx, pl.policy.Placer())
		pl.retryWhenKeptTooLong(ctx, pod)
	}
	c.mu.Lock()
	d := alloc.Diagnose(len(c.unfits), c.unfits)
	c.mu.Unlock()
	var notes []string
	if detail := d.Detail(); detail != "" {
		notes = append(notes, detail)
	}
	if pl.mover != nil && !c.claims {
		// kube-scheduler's DefaultPreemption, listed first, found no
		// victims: moving pods may make room.
		if note := pl.mover.Consider(ctx, pod, c.req, c.placer); note != "" {
			notes = append(notes, note)
		}
	}
	if len(notes) > 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "gpushare: "+strings.Join(notes, "; "))
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// PreScore implements fwk.PreScorePlugin: a pod that asks for no GPU is
// scored by kube-scheduler's own plugins alone, unless the policy is
// fragmentation-aware (preFilterPlain).
func (pl *GPUShare) PreScore(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if _, err := readCycle(state); err != nil && readPlain(state) == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score implements fwk.ScorePlugin. The raw score is the placement's rank
// key; NormalizeScore turns it into 0-100.
func (pl *GPUShare) Score(context.Context, fwk.CycleState, *corev1.Pod, fwk.NodeInfo) (int64, *fwk.Status) {
	return 0, nil
}

// ScoreExtensions implements fwk.ScorePlugin.
func (pl *GPUShare) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore ranks the nodes by the node policy, ties broken by the
// core's hash of (seed, pod, node): the best gets MaxNodeScore, the next
// ones step down to 0, so that with the plugin's weight the policy decides
// among nodes that other plugins rate alike.
func (pl *GPUShare) NormalizeScore(_ context.Context, state fwk.CycleState, _ *corev1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	b := rankingPool.Get().(*ranking)
	defer rankingPool.Put(b)
	ratings := slices.Grow(b.ratings[:0], len(scores))[:len(scores)]
	out := slices.Grow(b.out[:0], len(scores))[:len(scores)]
	b.ratings, b.out = ratings, out
	c, err := readCycle(state)
	switch pc := readPlain(state); {
	case err == nil:
		rated := c.ratings.byNode()
		for i := range scores {
			ratings[i] = rated[scores[i].Name]
		}
		byNodePool.Put(rated)
		// Every Filter call has returned: the slots go to the next pod.
		c.ratings.release()
	case pc != nil:
		pc.mu.Lock()
		for i := range scores {
			ratings[i] = pc.rating(scores[i].Name)
		}
		pc.mu.Unlock()
	default:
		return fwk.AsStatus(err)
	}
	b.ranker.RankScores(ratings, fwk.MaxScore, out)
	for i, score := range out {
		scores[i].Score = score
	}
	return nil
}

// ranking is NormalizeScore's buffers, kept in rankingPool from one pod
// to the next.
type ranking struct {
	ratings []alloc.Rating
	out     []int64
	ranker  decision.Ranker
}

var rankingPool = sync.Pool{New: func() any { return new(ranking) }}

// Reserve implements fwk.ReservePlugin: it books the pod's GPUs on the
// chosen node in the cache.
func (pl *GPUShare) Reserve(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	c, err := readCycle(state)
	if errors.Is(err, fwk.ErrNotFound) {
		// The pod asks for no GPU: nothing to book.
		return nil
	}
	if err != nil {
		return fwk.AsStatus(err)
	}
	var (
		p    *alloc.Placement
		held string
	)
	if len(c.holds) > 0 {
		keys := make([]string, len(c.holds))
		for i, h := range c.holds {
			keys[i] = h.Key
		}
		p, held, err = pl.cache.PlaceAndAssumeHeld(pod.UID, c.placer, nodeName, c.req, keys)
	} else {
		p, err = pl.cache.PlaceAndAssume(pod.UID, c.placer, nodeName, c.req)
	}
	if err != nil {
		pl.metrics.observe(resultUnschedulable, c.start)
		var unfit *alloc.Unfit
		if errors.As(err, &unfit) {
			return fwk.NewStatus(fwk.Unschedulable, unfit.Error())
		}
		return fwk.AsStatus(err)
	}
	if c.claims {
		// Book the GPUs DynamicResources allocated, not the policy's.
		dra, err := pl.allocated(pod, nodeName, p)
		if err == nil && dra != nil {
			err = pl.cache.Assume(pod.UID, c.req.Key, dra)
			p = dra
		}
		if err != nil {
			pl.cache.Forget(pod.UID)
			pl.metrics.observe(resultUnschedulable, c.start)
			return fwk.NewStatus(fwk.Unschedulable, "the GPUs DRA allocated the pod's claims do not fit beside what gpushare books there "+
				"(the node's ResourceSlice does not yet count every pod): "+err.Error())
		}
	}
	pl.metrics.observe(resultScheduled, c.start)
	c.mu.Lock()
	c.chosen = p
	c.mu.Unlock()
	if v := klog.FromContext(ctx).V(2); v.Enabled() {
		v.Info("Reserved GPUs", "pod", klog.KObj(pod), "node", nodeName, "gpus", describe(p))
	}
	if held != "" {
		klog.FromContext(ctx).V(2).Info("Took the place a defragmentation plan held", "pod", klog.KObj(pod), "node", nodeName, "hold", held)
	}
	return nil
}

// Unreserve implements fwk.ReservePlugin.
func (pl *GPUShare) Unreserve(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) {
	pl.cache.Forget(pod.UID)
}

// Bind implements fwk.BindPlugin: it binds a pod that asks for GPUs and
// records its allocation in the same request (see binding.Bind). Pods
// that ask for none are left to DefaultBinder. The profile must list
// GPUShare under bind so that it comes before DefaultBinder; if
// DefaultBinder binds first, PostBind adds the record.
func (pl *GPUShare) Bind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	c, err := readCycle(state)
	if err != nil || c.claims {
		return fwk.NewStatus(fwk.Skip)
	}
	p, err := c.reservation(nodeName)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if err := binding.Bind(ctx, pl.handle.ClientSet(), pod, nodeName, p, pl.asked(pod)); err != nil {
		return fwk.AsStatus(err)
	}
	c.mu.Lock()
	c.recorded = true
	c.mu.Unlock()
	return nil
}

// PostBind implements fwk.PostBindPlugin: the bound pod counts in the
// learned workload, a pod without GPUs by its CPU (a pod that is never
// bound never counts, so pods that cannot run do not steer placement);
// when another bind plugin bound a GPU pod, it records the allocation
// after the fact and says that the profile is misconfigured.
func (pl *GPUShare) PostBind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) {
	c, err := readCycle(state)
	if err != nil {
		// A pod without GPUs counts by its CPU when bound to a node
		// with gpushare GPUs, the CPU the tie-break weighs.
		if d, err := state.Read(plainKey); err == nil {
			if plain, ok := d.(*plainCycle); ok && plain.req != nil && plain.onGPUNode(nodeName) {
				pl.policy.Observe(string(pod.UID), plain.req)
			}
		}
		return
	}
	pl.policy.Observe(string(pod.UID), c.req)
	if l := pl.policy.Learner(); l != nil {
		pl.metrics.learned.WithLabelValues(pl.handle.ProfileName()).Set(float64(l.Observed()))
	}
	c.mu.Lock()
	recorded := c.recorded
	c.mu.Unlock()
	if recorded || c.claims {
		return
	}
	logger := klog.FromContext(ctx)
	logger.Error(nil, "Another plugin bound a GPU pod; list GPUShare under bind before DefaultBinder in the scheduler profile",
		"pod", klog.KObj(pod), "node", nodeName)
	p, err := c.reservation(nodeName)
	if err == nil {
		err = binding.Annotate(ctx, pl.handle.ClientSet(), pod, p, pl.asked(pod))
	}
	if err != nil {
		logger.Error(err, "Recording the GPU allocation after binding failed", "pod", klog.KObj(pod))
	}
}

// asked is what pod's request-shaping annotations say, for its record.
func (pl *GPUShare) asked(pod *corev1.Pod) *gpusharev1.Asked {
	return gpusharev1.AskedOf(pod.Annotations, pl.model.RequestAnnotations())
}

// heldOn returns the place held for the pod on node, nil if none.
func (c *cycle) heldOn(node string) *alloc.Placement {
	for i := range c.holds {
		if c.holds[i].Node == node {
			return c.holds[i].Placement
		}
	}
	return nil
}

// reservation returns the placement Reserve booked on node.
func (c *cycle) reservation(node string) (*alloc.Placement, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chosen == nil || c.chosen.Node != node {
		return nil, fmt.Errorf("%s: no reservation on node %s", Name, node)
	}
	return c.chosen, nil
}

func describe(p *alloc.Placement) string {
	b, _ := json.Marshal(record.Record(p).Containers)
	return string(b)
}

// EventsToRegister implements fwk.EnqueueExtensions: a pod rejected for
// want of GPUs is retried when a pod holding GPUs goes away or ends, when
// a node's GPU inventory or opt-in label changes, or when the pod itself
// changes (its GPU models or MPS annotations); a pod with ResourceClaims
// also when a ResourceSlice changes. A pod whose request is
// invalid is retried only when it changes itself.
func (pl *GPUShare) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: pl.podReleased},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: pl.podUpdated},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAnnotation | fwk.UpdateNodeLabel}, QueueingHintFn: pl.inventoryChanged},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.UpdateNodeAllocatable}, QueueingHintFn: pl.allocatableGrew},
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Update | fwk.Delete}, QueueingHintFn: pl.claimReleased},
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceSlice, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: pl.sliceChanged},
	}, nil
}

// sliceChanged requeues a pod with ResourceClaims when a node's
// ResourceSlice changes: Reserve refuses the claims DRA allocated from a
// slice that did not yet count a pod's booking (allocated), and the
// slice that counts it is when to try again.
func (pl *GPUShare) sliceChanged(_ klog.Logger, pod *corev1.Pod, _, _ any) (fwk.QueueingHint, error) {
	if len(pod.Spec.ResourceClaims) == 0 {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// allocatableGrew requeues a pod when a node's kubelet advertises more of
// a resource the pod asks (kubeletShort): a device plugin registered
// again, after a kubelet or node daemon restart.
func (pl *GPUShare) allocatableGrew(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	o, okOld := oldObj.(*corev1.Node)
	n, okNew := newObj.(*corev1.Node)
	if !okOld || !okNew {
		return fwk.Queue, nil
	}
	for _, a := range pl.kubeletAsks(pod) {
		was, had := o.Status.Allocatable[a.name]
		if now, has := n.Status.Allocatable[a.name]; had && (!has || now.Cmp(was) > 0) {
			return fwk.Queue, nil
		}
	}
	return fwk.QueueSkip, nil
}

// The hints apply the event to the cache themselves before they requeue
// the pod: the cache's own informer handler may run after the scheduler's,
// and a pod retried against a cache that still holds the deleted pod would
// be rejected again and wait for the next event. Applying an event twice
// is harmless. kube-scheduler orders its own cache, and DynamicResources'
// claim cache, before the queue's events; a plugin's cache has no such
// hook. Hints that only decide were tried: a preemptor retried before the
// cache dropped its victims was turned away again and preempted a second
// node's pods (TestPreemption).

// A pod that held GPUs through claims reserved for it alone frees them
// when it goes, as a pod with a record does: the claims are deallocated
// next, and kube-scheduler's preemption waits for the pod's deletion.
// Whether it did is judged from the pod, not the cache, whose own
// handler may have seen the deletion first.
func (pl *GPUShare) podReleased(_ klog.Logger, pod *corev1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	if p, ok := unwrap(oldObj).(*corev1.Pod); ok {
		if !record.Recorded(p) && len(p.Spec.ResourceClaims) == 0 {
			return fwk.QueueSkip, nil
		}
		pl.cache.RemovePod(p.UID)
	}
	return pl.retryable(pod), nil
}

func (pl *GPUShare) podUpdated(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	n, ok := newObj.(*corev1.Pod)
	if !ok {
		return fwk.QueueSkip, nil
	}
	if n.UID == pod.UID {
		return fwk.Queue, nil
	}
	o, ok := oldObj.(*corev1.Pod)
	if !record.Recorded(n) && len(n.Spec.ResourceClaims) == 0 || !gpucache.Ended(n) || ok && gpucache.Ended(o) {
		return fwk.QueueSkip, nil
	}
	// A pod holding GPUs ended: they are free.
	pl.cache.RemovePod(n.UID)
	return pl.retryable(pod), nil
}

// retryable is Queue for a pod whose request is valid: an invalid one
// waits for a change of its own, whatever else frees up.
func (pl *GPUShare) retryable(pod *corev1.Pod) fwk.QueueingHint {
	if _, err := pl.model.PodRequest(pod); err != nil {
		return fwk.QueueSkip
	}
	return fwk.Queue
}

func (pl *GPUShare) inventoryChanged(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	n, ok := newObj.(*corev1.Node)
	if !ok || n.Labels[gpusharev1.NodeLabel] != "true" {
		return fwk.QueueSkip, nil
	}
	pl.cache.SetNode(n)
	o, ok := oldObj.(*corev1.Node)
	if !ok {
		return pl.retryable(pod), nil
	}
	if o.Labels[gpusharev1.NodeLabel] != "true" || o.Annotations[gpusharev1.InventoryAnnotation] != n.Annotations[gpusharev1.InventoryAnnotation] {
		return pl.retryable(pod), nil
	}
	return fwk.QueueSkip, nil
}

func unwrap(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}
