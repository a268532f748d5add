package extender

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/plugin"
	"github.com/gpushare/gpushare/pkg/resource"
)

// DefaultMaxBodyBytes bounds a request body: a filter request with full
// Node objects (nodeCacheCapable false) for 5000 nodes fits.
const DefaultMaxBodyBytes = 64 << 20

// Server answers kube-scheduler's extender calls.
type Server struct {
	Model  *resource.Model
	Placer *alloc.Placer
	Cache  *gpucache.Cache
	Client kubernetes.Interface
	// Pods, if set, is read before the apiserver when binding.
	Pods   corelisters.PodLister
	Logger klog.Logger
	// Seed breaks ties between equal nodes, as in the plugin.
	Seed uint64
	// Prefix is the URL prefix of the verbs, e.g. /gpushare-scheduler.
	Prefix string
	// MaxBodyBytes bounds request bodies; DefaultMaxBodyBytes if 0.
	MaxBodyBytes int64
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
}

// filtered is one filter call's ratings of the nodes that passed.
type filtered struct {
	pod types.UID
	at  time.Time
	fit map[string]alloc.Score
}

// reuseFor is how long prioritize may reuse a filter's ratings. The two
// calls of one scheduling cycle come milliseconds apart; the ratings only
// rank nodes (bind checks the placement again under the cache's lock).
const reuseFor = 5 * time.Second

func (s *Server) remember(pod types.UID, fit map[string]alloc.Score) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = &filtered{pod: pod, at: time.Now(), fit: fit}
}

// recall returns the ratings of exactly names (later filters may have
// dropped some of the nodes this one passed) from the latest filter of
// pod, or nil when it did not rate them all.
func (s *Server) recall(pod types.UID, names []string) map[string]alloc.Score {
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if last == nil || pod == "" || last.pod != pod || time.Since(last.at) > reuseFor {
		return nil
	}
	fit := make(map[string]alloc.Score, len(names))
	for _, n := range names {
		score, ok := last.fit[n]
		if !ok {
			return nil
		}
		fit[n] = score
	}
	return fit
}

// Handler returns the HTTP handler: POST {prefix}/filter, /prioritize,
// /bind and GET /healthz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	p := strings.TrimSuffix(s.Prefix, "/")
	mux.HandleFunc("POST "+p+"/filter", s.handle("filter", s.filter))
	mux.HandleFunc("POST "+p+"/prioritize", s.handle("prioritize", s.prioritize))
	mux.HandleFunc("POST "+p+"/bind", s.handle("bind", s.bind))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if s.Ready != nil && !s.Ready() {
			http.Error(w, "cache not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// badRequest is an error in the request, answered with 400.
type badRequest struct{ error }

// handle decodes a size-limited JSON body into the verb's argument type,
// calls fn and encodes its result. A malformed body gets 400 with the
// reason; a panic is never the answer to input.
func (s *Server) handle(verb string, fn func(context.Context, []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		limit := s.MaxBodyBytes
		if limit <= 0 {
			limit = DefaultMaxBodyBytes
		}
		body, err := readBody(w, r, limit)
		var out any
		if err == nil {
			out, err = fn(r.Context(), body)
		}
		result := "ok"
		switch {
		case errors.As(err, new(badRequest)):
			result = "bad_request"
			http.Error(w, fmt.Sprintf("%s: %v", verb, err), http.StatusBadRequest)
		case err != nil:
			result = "error"
			http.Error(w, fmt.Sprintf("%s: %v", verb, err), http.StatusInternalServerError)
		default:
			w.Header().Set("Content-Type", "application/json")
			if err := json.NewEncoder(w).Encode(out); err != nil {
				s.Logger.Error(err, "Writing the response", "verb", verb)
			}
		}
		s.Metrics.observe(verb, result, time.Since(start))
	}
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, badRequest{fmt.Errorf("request body larger than %d bytes", limit)}
		}
		return nil, badRequest{fmt.Errorf("reading the request: %w", err)}
	}
	return body, nil
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

// decodeCall decodes a filter or prioritize call.
func (s *Server) decodeCall(body []byte) (*call, error) {
	var head argsHead
	if err := decode(body, &head); err != nil {
		return nil, err
	}
	if head.Pod == nil {
		return nil, badRequest{errors.New("request has no pod")}
	}
	if m := &head.Pod.Metadata; head.NodeNames != nil && isNull(head.Nodes) && s.Pods != nil && m.ResourceVersion != "" {
		if pod, err := s.Pods.Pods(m.Namespace).Get(m.Name); err == nil && string(pod.UID) == m.UID && pod.ResourceVersion == m.ResourceVersion {
			return &call{pod: pod, names: *head.NodeNames}, nil
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

// request translates the pod; nil with no error for a pod asking no GPU.
func (s *Server) request(pod *corev1.Pod) (*alloc.PodRequest, error) {
	req, err := s.Model.PodRequest(pod)
	if err != nil {
		return nil, err
	}
	if !req.GPUs() {
		return nil, nil
	}
	// kube-scheduler accounts for CPU and memory.
	req.CPUMilli, req.MemoryMiB = 0, 0
	return req, nil
}

// place rates the pod on each named node with the core's Rater, which
// rates nodes of one shape once.
func (s *Server) place(names []string, req *alloc.PodRequest) (map[string]alloc.Score, map[string]*alloc.Unfit, map[string]error) {
	fit := make(map[string]alloc.Score, len(names))
	unfit := map[string]*alloc.Unfit{}
	outside := map[string]error{}
	r := s.Placer.NewRater(req, s.Seed)
	s.Cache.ReadEach(names, func(name string, st *alloc.NodeState, err error) {
		if err != nil {
			outside[name] = err
			return
		}
		rating, u := r.Rate(st)
		if u != nil {
			unfit[name] = u
			return
		}
		fit[name] = rating.Score
	})
	return fit, unfit, outside
}

func (s *Server) filter(_ context.Context, body []byte) (any, error) {
	c, err := s.decodeCall(body)
	if err != nil {
		return nil, err
	}
	res := &extenderv1.ExtenderFilterResult{FailedNodes: map[string]string{}, FailedAndUnresolvableNodes: map[string]string{}}
	req, err := s.request(c.pod)
	if err != nil {
		for _, n := range c.names {
			res.FailedAndUnresolvableNodes[n] = err.Error()
		}
		return c.finish(res, nil), nil
	}
	if req == nil {
		return c.finish(res, c.names), nil
	}
	fit, unfit, outside := s.place(c.names, req)
	s.remember(c.pod.UID, fit)
	for n := range outside {
		res.FailedAndUnresolvableNodes[n] = plugin.ReasonNotGPUShareNode
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
		reason := string(u.Reasons[0].Reason)
		if detail != "" {
			reason += " (gpushare: " + detail + ")"
		}
		res.FailedNodes[n] = reason
	}
	keep := fit
	limit := s.MaxNodes
	if s.BestOnly && !softPreferences(c.pod) {
		limit = 1
	}
	if limit > 0 && len(fit) > limit {
		// Only the best go on to scoring: kube-scheduler's own filters
		// have passed every node named here, so any of them may be
		// chosen, and the policy's choice is among the best.
		best := s.rank(fit, req.Key)[:limit]
		keep = make(map[string]alloc.Score, len(best))
		for _, r := range best {
			keep[r.name] = r.score
		}
	}
	passed := make([]string, 0, len(keep))
	for _, n := range c.names {
		if _, ok := keep[n]; ok {
			passed = append(passed, n)
		}
	}
	return c.finish(res, passed), nil
}

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

// ranked is a node with its rating and tie-break key.
type ranked struct {
	name  string
	score alloc.Score
	tie   uint64
}

// rank orders the rated nodes best first, ties broken by the core's hash
// of (seed, pod, node) as in the plugin.
func (s *Server) rank(fit map[string]alloc.Score, podKey string) []ranked {
	out := make([]ranked, 0, len(fit))
	for n, sc := range fit {
		out = append(out, ranked{n, sc, alloc.TieBreak(podKey, n, s.Seed)})
	}
	slices.SortFunc(out, func(a, b ranked) int {
		if c := b.score.Compare(a.score); c != 0 {
			return c
		}
		return cmp.Compare(b.tie, a.tie)
	})
	return out
}

func (s *Server) prioritize(_ context.Context, body []byte) (any, error) {
	c, err := s.decodeCall(body)
	if err != nil {
		return nil, err
	}
	out := make(extenderv1.HostPriorityList, 0, len(c.names))
	req, err := s.request(c.pod)
	if err != nil || req == nil {
		for _, n := range c.names {
			out = append(out, extenderv1.HostPriority{Host: n})
		}
		return out, nil
	}
	fit := s.recall(c.pod.UID, c.names)
	if fit == nil {
		fit, _, _ = s.place(c.names, req)
	}
	order := s.rank(fit, req.Key)
	score := make(map[string]int64, len(order))
	for rank, r := range order {
		n := r.name
		// The best gets 10, the rest step down from 5 to 0: the gap,
		// times kube-scheduler's x10 scaling and the weight, outweighs the
		// default plugins, as in the plugin's rankScore.
		score[n] = int64(5 * (len(order) - 1 - rank) / max(len(order)-1, 1))
		if rank == 0 {
			score[n] = extenderv1.MaxExtenderPriority
		}
	}
	for _, n := range c.names {
		out = append(out, extenderv1.HostPriority{Host: n, Score: score[n]})
	}
	return out, nil
}

func (s *Server) bind(ctx context.Context, body []byte) (any, error) {
	var args extenderv1.ExtenderBindingArgs
	if err := decode(body, &args); err != nil {
		return nil, err
	}
	if args.PodName == "" || args.PodNamespace == "" || args.Node == "" {
		return nil, badRequest{errors.New("bind needs podName, podNamespace and node")}
	}
	if err := s.bindPod(ctx, &args); err != nil {
		s.Logger.Error(err, "Bind failed", "pod", klog.KRef(args.PodNamespace, args.PodName), "node", args.Node)
		return &extenderv1.ExtenderBindingResult{Error: err.Error()}, nil
	}
	return &extenderv1.ExtenderBindingResult{}, nil
}

// pod returns the pod to bind: from the informer when it has this one
// (the scheduler saw the pod there too), else from the apiserver.
func (s *Server) pod(ctx context.Context, args *extenderv1.ExtenderBindingArgs) (*corev1.Pod, error) {
	if s.Pods != nil {
		pod, err := s.Pods.Pods(args.PodNamespace).Get(args.PodName)
		if err == nil && (args.PodUID == "" || pod.UID == args.PodUID) {
			return pod, nil
		}
	}
	return s.Client.CoreV1().Pods(args.PodNamespace).Get(ctx, args.PodName, metav1.GetOptions{})
}

func (s *Server) bindPod(ctx context.Context, args *extenderv1.ExtenderBindingArgs) error {
	pod, err := s.pod(ctx, args)
	if err != nil {
		return err
	}
	if args.PodUID != "" && pod.UID != args.PodUID {
		return fmt.Errorf("pod %s/%s has UID %s, not %s: it was replaced", args.PodNamespace, args.PodName, pod.UID, args.PodUID)
	}
	req, err := s.request(pod)
	if err != nil {
		return err
	}
	var p *alloc.Placement
	if req != nil {
		if p, err = s.Cache.PlaceAndAssume(pod.UID, s.Placer, args.Node, req); err != nil {
			return err
		}
	}
	if err := plugin.Bind(ctx, s.Client, pod, args.Node, p); err != nil {
		// Nothing was recorded: free the GPUs for the next try.
		s.Cache.Forget(pod.UID)
		return err
	}
	s.Logger.V(2).Info("Bound pod", "pod", klog.KObj(pod), "node", args.Node)
	return nil
}
