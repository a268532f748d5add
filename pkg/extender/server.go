package extender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/decision"
	"github.com/gpushare/gpushare/pkg/resource"
	"github.com/gpushare/gpushare/pkg/workload"
)

// Server answers kube-scheduler's extender calls.
type Server struct {
	Model *resource.Model
	// Policy places pods; a learning one observes each pod filter sees.
	Policy *workload.Policy
	Cache  *gpucache.Cache
	Client kubernetes.Interface
	// Pods, if set, is read before the apiserver when binding.
	Pods corelisters.PodLister
	// Claims, if set, lists the ResourceClaims: filter refuses a pod that
	// asks GPUs both through them and through extended resources.
	Claims resourcelisters.ResourceClaimLister
	Logger klog.Logger
	// Seed breaks ties between equal nodes (alloc.TieBreak).
	Seed uint64
	// Prefix is the URL prefix of the verbs, e.g. /gpushare-scheduler.
	Prefix string
	// MaxBodyBytes bounds filter and prioritize bodies;
	// DefaultMaxBodyBytes if 0. Larger ones get 413.
	MaxBodyBytes int64
	// MaxInflight bounds filter and prioritize calls in flight, and
	// MaxBindsInflight bind calls; DefaultMaxInflight and
	// DefaultMaxBindsInflight if 0. Calls beyond get 429, but for up to
	// BindsQueuedPerSlot binds per slot, which wait for one.
	MaxInflight, MaxBindsInflight int
	// SchedulerNames are the schedulers whose pods bind binds: the
	// profiles of the KubeSchedulerConfiguration that calls this
	// extender. Bind refuses pods of any other.
	SchedulerNames []string
	// Ready reports whether the cache has synced; /healthz fails until it has.
	Ready func() bool
	// Metrics counts decisions; may be nil.
	Metrics *Metrics
	// MaxNodes, if positive, is the most nodes filter passes on: the best
	// by the node policy. Fewer nodes make kube-scheduler's scoring and
	// the prioritize call cheaper; 0 passes every node that fits.
	MaxNodes int
	// BestOnly passes pods without soft scheduling preferences on the
	// best node alone: with one node kube-scheduler skips its scoring and
	// the prioritize call, and the node policy decides as in the core.
	BestOnly bool

	// last is the latest filter's ratings, which the prioritize call for
	// the same pod reuses instead of rating every node again.
	mu   sync.Mutex
	last *filtered
	// passed is what the latest filter of each pod passed; bind refuses
	// other nodes.
	passed passedNodes
	// reserved holds the placements filter assumed for pods it passed on
	// one node alone, until their binds.
	reserved reservations
	// binds bounds the bind calls the latest Handler serves at once.
	binds *limit
}

// ExpireReservations forgets the placements filter assumed for pods
// whose bind has not come within ReservationTTL. Filter calls do it too;
// RunExpiry does it while none come.
func (s *Server) ExpireReservations() { s.reserved.expire(s.Cache) }

// RunExpiry calls ExpireReservations every ReservationTTL until ctx ends.
func (s *Server) RunExpiry(ctx context.Context) {
	t := time.NewTicker(ReservationTTL)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.ExpireReservations()
		}
	}
}

// filtered is one filter call's ratings of the nodes that fit.
type filtered struct {
	pod types.UID
	at  time.Time
	fit []decision.Rated
}

// reuseFor is how long prioritize may reuse a filter's ratings. The two
// calls of one scheduling cycle come milliseconds apart; the ratings only
// rank nodes (bind checks the placement again under the cache's lock).
const reuseFor = 5 * time.Second

func (s *Server) remember(pod types.UID, fit []decision.Rated) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = &filtered{pod: pod, at: time.Now(), fit: fit}
}

// recall returns the ratings of exactly names (later filters may have
// dropped some of the nodes this one passed) from the latest filter of
// pod, or nil when it did not rate them all.
func (s *Server) recall(pod types.UID, names []string) []decision.Rated {
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if last == nil || pod == "" || last.pod != pod || time.Since(last.at) > reuseFor {
		return nil
	}
	byNode := make(map[string]alloc.Rating, len(last.fit))
	for _, r := range last.fit {
		byNode[r.Node] = r.Rating
	}
	fit := make([]decision.Rated, 0, len(names))
	for _, n := range names {
		rating, ok := byNode[n]
		if !ok {
			return nil
		}
		fit = append(fit, decision.Rated{Node: n, Rating: rating})
	}
	return fit
}

// decode parses body once: a syntax error is "malformed JSON", JSON of
// the wrong shape a "malformed request".
func decode(body []byte, into any) error {
	err := json.Unmarshal(body, into)
	var syntax *json.SyntaxError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &syntax):
		return badRequest{fmt.Errorf("malformed JSON: %w", err)}
	}
	return badRequest{fmt.Errorf("malformed request: %w", err)}
}

// call is a decoded filter or prioritize request.
type call struct {
	pod   *corev1.Pod
	names []string
	// nodes is set when the call carried Node objects (nodeCacheCapable
	// false); the answer then carries them too.
	nodes *corev1.NodeList
}

// argsHead is the part of ExtenderArgs read first: the pod's identity and
// the node names. The pod is decoded in full only when the informer does
// not hold this very version of it (kube-scheduler sends the whole object
// with each call).
type argsHead struct {
	Pod *struct {
		Metadata struct {
			Name, Namespace, UID, ResourceVersion string
		}
	}
	Nodes     json.RawMessage
	NodeNames *[]string
}

// informerPod returns the pod the informer holds if it is this very
// version of it, else nil.
func (s *Server) informerPod(namespace, name, uid, resourceVersion string) *corev1.Pod {
	if s.Pods == nil || resourceVersion == "" {
		return nil
	}
	pod, err := s.Pods.Pods(namespace).Get(name)
	if err != nil || string(pod.UID) != uid || pod.ResourceVersion != resourceVersion {
		return nil
	}
	return pod
}

// decodeCall decodes a filter or prioritize call.
func (s *Server) decodeCall(body []byte) (*call, error) {
	// scanArgs first, then encoding/json's head for what it declines;
	// the whole pod only if the informer does not hold this version.
	scanned := false
	if s.Pods != nil {
		var a quickArgs
		if a, scanned = scanArgs(body); scanned {
			if pod := s.informerPod(a.namespace, a.name, a.uid, a.resourceVersion); pod != nil {
				return &call{pod: pod, names: a.names}, nil
			}
		}
	}
	if !scanned {
		var head argsHead
		if err := decode(body, &head); err != nil {
			return nil, err
		}
		if head.Pod == nil {
			return nil, badRequest{errors.New("request has no pod")}
		}
		if m := &head.Pod.Metadata; head.NodeNames != nil && isNull(head.Nodes) {
			if pod := s.informerPod(m.Namespace, m.Name, m.UID, m.ResourceVersion); pod != nil {
				return &call{pod: pod, names: *head.NodeNames}, nil
			}
		}
	}
	var args extenderv1.ExtenderArgs
	if err := decode(body, &args); err != nil {
		return nil, err
	}
	switch {
	case args.Pod == nil:
		return nil, badRequest{errors.New("request has no pod")}
	case args.NodeNames != nil:
		return &call{pod: args.Pod, names: *args.NodeNames}, nil
	case args.Nodes != nil:
		names := make([]string, len(args.Nodes.Items))
		for i := range args.Nodes.Items {
			names[i] = args.Nodes.Items[i].Name
		}
		return &call{pod: args.Pod, names: names, nodes: args.Nodes}, nil
	}
	return nil, badRequest{errors.New("request has neither nodes nor nodeNames")}
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// placer is the Placer that places pod now: the policy's, as pod picks
// it, without keeping idle GPUs from a pod that has waited long enough
// (decision.Kept).
func (s *Server) placer(pod *corev1.Pod) (*alloc.Placer, error) {
	placer, err := decision.Placer(s.Policy, pod)
	if err != nil {
		return nil, err
	}
	return decision.Kept(s.Policy, placer, pod, time.Now()), nil
}

// place rates the pod on each named node with placer's Rater, which
// rates nodes of one shape once. The nodes that fit come in names'
// order, in a slice: kube-scheduler names hundreds of nodes per call,
// and a map of them cost more than the rest of the call's bookkeeping.
func (s *Server) place(names []string, placer *alloc.Placer, req *alloc.PodRequest) ([]decision.Rated, map[string]*alloc.Unfit, map[string]error) {
	var fit []decision.Rated
	if p, ok := ratings.Get().(*[]decision.Rated); ok {
		fit = (*p)[:0]
	}
	if cap(fit) < len(names) {
		fit = make([]decision.Rated, 0, len(names))
	}
	unfit := map[string]*alloc.Unfit{}
	outside := map[string]error{}
	r := placer.NewRater(req, s.Seed)
	s.Cache.ReadEach(names, func(name string, st *alloc.NodeState, sum *alloc.Summary, err error) {
		if err != nil {
			outside[name] = err
			return
		}
		rating, u := r.RateSummary(st, sum)
		if u != nil {
			unfit[name] = u
			return
		}
		fit = append(fit, decision.Rated{Node: name, Rating: rating})
	})
	return fit, unfit, outside
}

func (s *Server) filter(_ context.Context, body []byte) (any, error) {
	c, err := s.decodeCall(body)
	if err != nil {
		return nil, err
	}
	res := &extenderv1.ExtenderFilterResult{FailedNodes: map[string]string{}, FailedAndUnresolvableNodes: map[string]string{}}
	// What an earlier cycle reserved for the pod is not counted against
	// it in this one.
	s.reserved.drop(s.Cache, c.pod.UID)
	req, err := decision.Request(s.Model, c.pod)
	var placer *alloc.Placer
	if err == nil && req != nil {
		placer, err = s.placer(c.pod)
	}
	if err == nil && req != nil && c.pod.Spec.SchedulingGroup != nil {
		err = errors.New(decision.ReasonGangInExtender)
	}
	if err == nil && req != nil && len(c.pod.Spec.ResourceClaims) > 0 && claim.PodAsks(c.pod, s.Claims) {
		err = errors.New(decision.ReasonMixedRequest)
	}
	if err != nil {
		for _, n := range c.names {
			res.FailedAndUnresolvableNodes[n] = err.Error()
		}
		s.passed.put(c.pod.UID, nil)
		return c.finish(res, nil), nil
	}
	if req == nil {
		s.passed.put(c.pod.UID, c.names)
		return c.finish(res, c.names), nil
	}
	fit, unfit, outside := s.place(c.names, placer, req)
	if len(fit) == 0 && s.reservable(c.pod) {
		// Its GPU demand waits: what keeping idle GPUs spare weighs.
		// Turned away while they were kept, it may end the keeping: the
		// policy reads the room again for the next call.
		s.Cache.Wait(c.pod.UID, req)
		if placer.Spare() != nil {
			s.Policy.Reread()
		}
	}
	for n, err := range outside {
		if reason, resolvable := decision.OutsideReason(err); resolvable {
			res.FailedNodes[n] = reason
		} else {
			res.FailedAndUnresolvableNodes[n] = reason
		}
	}
	// Every node short of GPUs gets the same reason with the cluster-wide
	// numbers, so kube-scheduler's event reads "3 InsufficientGPUMemory
	// (largest free share on any GPU is 3000 MiB, pod needs 3500 MiB)".
	us := make([]*alloc.Unfit, 0, len(unfit))
	for _, u := range unfit {
		us = append(us, u)
	}
	detail := alloc.Diagnose(len(us), us).Detail()
	for n, u := range unfit {
		reason := decision.Reason(u)
		if detail != "" {
			reason += " (gpushare: " + detail + ")"
		}
		if u.Resolvable() {
			res.FailedNodes[n] = reason
		} else {
			// kube-scheduler's preemption then leaves the node alone.
			res.FailedAndUnresolvableNodes[n] = reason
		}
	}
	limit := s.MaxNodes
	if s.BestOnly && !softPreferences(c.pod) {
		limit = 1
	}
	passed := make([]string, 0, min(len(fit), max(limit, 1)))
	switch {
	case limit <= 0 || len(fit) <= limit:
		for _, r := range fit {
			passed = append(passed, r.Node)
		}
	case limit == 1:
		// The best alone: no need to rank the rest.
		passed = append(passed, decision.Best(fit).Node)
	default:
		// Only the best go on to scoring: kube-scheduler's own filters
		// have passed every node named here, so any of them may be
		// chosen, and the policy's choice is among the best. They are
		// passed in the order named; a name given twice counts once.
		keep := make(map[string]bool, limit)
		for _, r := range rank(fit) {
			if len(keep) == limit {
				break
			}
			keep[r.Node] = true
		}
		for _, r := range fit {
			if keep[r.Node] {
				passed = append(passed, r.Node)
				delete(keep, r.Node)
			}
		}
	}
	s.passed.put(c.pod.UID, passed)
	if len(passed) == 1 && s.reservable(c.pod) {
		// kube-scheduler binds the pod to this node or to none, and
		// filters the next pods before the bind call arrives.
		if err := s.reserved.reserve(s.Cache, c.pod.UID, placer, passed[0], req); err != nil {
			s.Logger.V(2).Info("Not reserving the pod's GPUs until its bind", "pod", klog.KObj(c.pod), "node", passed[0], "err", err)
		}
	}
	if len(passed) > 1 {
		// kube-scheduler calls prioritize next, with these nodes.
		s.remember(c.pod.UID, fit)
	} else {
		// It calls nothing more for this cycle; the ratings are done.
		ratings.Put(&fit)
	}
	return c.finish(res, passed), nil
}

// reservable reports whether filter may hold GPUs for pod until its bind:
// a pod of this extender's schedulers, not bound, that the informer holds
// (when the server has one), so that a call naming a made-up pod holds
// nothing.
func (s *Server) reservable(pod *corev1.Pod) bool {
	if pod.UID == "" || pod.Spec.NodeName != "" || !slices.Contains(s.SchedulerNames, pod.Spec.SchedulerName) {
		return false
	}
	if s.Pods == nil {
		return true
	}
	held, err := s.Pods.Pods(pod.Namespace).Get(pod.Name)
	return err == nil && held.UID == pod.UID && held.Spec.NodeName == ""
}

// ratings holds place's slices of ratings, for reuse.
var ratings sync.Pool

// softPreferences reports whether kube-scheduler's scoring could serve a
// preference of the pod's own: preferred node or pod (anti-)affinity, or
// a topology spread constraint that is only a preference.
func softPreferences(pod *corev1.Pod) bool {
	if a := pod.Spec.Affinity; a != nil {
		if a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 ||
			a.PodAffinity != nil && len(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 ||
			a.PodAntiAffinity != nil && len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
			return true
		}
	}
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == corev1.ScheduleAnyway {
			return true
		}
	}
	return false
}

// finish fills the passing nodes in the form the call used.
func (c *call) finish(res *extenderv1.ExtenderFilterResult, passed []string) *extenderv1.ExtenderFilterResult {
	if passed == nil {
		passed = []string{}
	}
	if c.nodes == nil {
		res.NodeNames = &passed
		return res
	}
	list := &corev1.NodeList{}
	keep := make(map[string]bool, len(passed))
	for _, n := range passed {
		keep[n] = true
	}
	for _, n := range c.nodes.Items {
		if keep[n.Name] {
			list.Items = append(list.Items, n)
		}
	}
	res.Nodes = list
	return res
}

// rank returns the rated nodes best first, as the plugin orders them.
func rank(fit []decision.Rated) []decision.Rated {
	out := slices.Clone(fit)
	decision.Rank(out)
	return out
}

func (s *Server) prioritize(_ context.Context, body []byte) (any, error) {
	c, err := s.decodeCall(body)
	if err != nil {
		return nil, err
	}
	out := make(extenderv1.HostPriorityList, 0, len(c.names))
	req, err := decision.Request(s.Model, c.pod)
	var placer *alloc.Placer
	if err == nil && req != nil {
		placer, err = s.placer(c.pod)
	}
	if err != nil || req == nil {
		for _, n := range c.names {
			out = append(out, extenderv1.HostPriority{Host: n})
		}
		return out, nil
	}
	fit := s.recall(c.pod.UID, c.names)
	if fit == nil {
		fit, _, _ = s.place(c.names, placer, req)
	}
	order := rank(fit)
	score := make(map[string]int64, len(order))
	for i, r := range order {
		// The best gets 10, the rest step down from 5 to 0: the gap,
		// times kube-scheduler's x10 scaling and the weight, outweighs the
		// default plugins.
		score[r.Node] = decision.RankScore(i, len(order), extenderv1.MaxExtenderPriority)
	}
	for _, n := range c.names {
		out = append(out, extenderv1.HostPriority{Host: n, Score: score[n]})
	}
	return out, nil
}
