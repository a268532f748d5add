package decision

import (
	"cmp"
	"errors"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/resource"
	"github.com/gpushare/gpushare/pkg/workload"
)

// Request translates pod with model: nil with no error for a pod that
// asks for no GPU. The request keeps the pod's CPU and memory: the cache
// counts every bound pod's against its node (cache.Options.Resources), so
// the core sees what a node has left, as kube-scheduler does, and the
// fragmentation-aware policies weigh it.
func Request(model *resource.Model, pod *corev1.Pod) (*alloc.PodRequest, error) {
	req, err := model.PodRequest(pod)
	if err != nil {
		return nil, err
	}
	if !req.GPUs() {
		return nil, nil
	}
	return req, nil
}

// Rated is a node with the core's rating of the pod on it.
type Rated struct {
	Node string
	alloc.Rating
}

// Rank orders nodes best first: by the node policy's score, ties broken
// by the core's hash of (seed, pod, node), the higher first.
func Rank(nodes []Rated) {
	slices.SortFunc(nodes, func(a, b Rated) int { return better(a.Rating, b.Rating) })
}

// Best returns the node Rank would put first, the least name of equals;
// the zero Rated if there are none.
func Best(rated []Rated) Rated {
	var best Rated
	for i, r := range rated {
		if c := better(r.Rating, best.Rating); i == 0 || c < 0 || c == 0 && r.Node < best.Node {
			best = r
		}
	}
	return best
}

// better orders a before b (-1) if a is the better rating.
func better(a, b alloc.Rating) int {
	if c := b.Score.Compare(a.Score); c != 0 {
		return c
	}
	return cmp.Compare(b.Tie, a.Tie)
}

// RankScores returns the RankScore of each rating's rank in Rank's order,
// in the order given.
func RankScores(ratings []alloc.Rating, top int64) []int64 {
	out := make([]int64, len(ratings))
	var r Ranker
	r.RankScores(ratings, top, out)
	return out
}

// Ranker ranks ratings as RankScores does, in a buffer it keeps from one
// call to the next: the plugin ranks hundreds of nodes for every pod. The
// zero Ranker is ready; it is not safe for concurrent use.
type Ranker struct {
	order []ranked
}

type ranked struct {
	alloc.Rating
	i int
}

// RankScores sets out[i] to the RankScore of ratings[i]'s rank in Rank's
// order; out must be as long as ratings. It sorts the ratings with their
// indexes, inline.
func (r *Ranker) RankScores(ratings []alloc.Rating, top int64, out []int64) {
	order := r.order[:0]
	for i, rt := range ratings {
		order = append(order, ranked{rt, i})
	}
	r.order = order
	// better's order, written out: better is not inlined, and the call
	// costs a third of the sort (TestRankScores holds the two equal).
	slices.SortFunc(order, func(a, b ranked) int {
		switch {
		case a.Score.Primary != b.Score.Primary:
			return cmp.Compare(b.Score.Primary, a.Score.Primary)
		case a.Score.Secondary != b.Score.Secondary:
			return cmp.Compare(b.Score.Secondary, a.Score.Secondary)
		}
		return cmp.Compare(b.Tie, a.Tie)
	})
	for rank, rt := range order {
		out[rt.i] = RankScore(rank, len(ratings), top)
	}
}

// RankScore is the score of rank (0 the best) of n ranked nodes, on a
// scale whose top is top: the best gets top, the others step down evenly
// from top/2 to 0. With the weight kube-scheduler gives gpushare, the gap
// of half the scale outweighs every default plugin together, so the node
// policy's choice is the scheduler's, while the others keep an order.
func RankScore(rank, n int, top int64) int64 {
	if rank == 0 {
		return top
	}
	return top / 2 * int64(n-1-rank) / int64(max(n-1, 1))
}

// Reason is the reason to give kube-scheduler for a node the pod does not
// fit: the first of the core's reasons.
func Reason(u *alloc.Unfit) string {
	if len(u.Reasons) == 0 {
		return string(alloc.ReasonNodeRejected)
	}
	return string(u.Reasons[0].Reason)
}

// Reasons for nodes the cache does not offer.
const (
	// ReasonNotGPUShareNode is for nodes outside gpushare.
	ReasonNotGPUShareNode = "node is not a gpushare GPU node"
	// ReasonDaemonDown is for nodes whose gpushare-node let its lease
	// expire: nothing there would hand a container its GPUs.
	ReasonDaemonDown = "gpushare-node is not running on the node (its lease expired)"
	// ReasonGangInExtender is for a GPU pod of a PodGroup in extender
	// mode: kube-scheduler places a group's pods in one cycle and undoes
	// what did not fit without telling its extenders, which would keep
	// GPUs booked for a group that waits; gpushare-scheduler books each
	// pod in that cycle and undoes it with the cycle.
	ReasonGangInExtender = "a PodGroup's GPU pods (spec.schedulingGroup) are placed by gpushare-scheduler, not by the extender: set schedulerName to gpushare-scheduler's"
	// ReasonMixedRequest is for a pod that asks GPUs both through
	// extended resources and through claims of gpushare's devices: DRA
	// would allocate the claims from what the node's slices offer, which
	// does not yet count the pod's own shares, and the two could land on
	// one GPU past its memory.
	ReasonMixedRequest = "the pod asks for GPUs both through extended resources and through ResourceClaims of gpushare's DeviceClasses, " +
		"which cannot be booked together: ask through one or the other (docs/dra.md, \"Claims or extended resources?\")"
)

// OutsideReason is the reason for a node the cache refused with err, and
// whether the node may come back without a change to the pod.
func OutsideReason(err error) (reason string, resolvable bool) {
	if errors.Is(err, gpucache.ErrDaemonDown) {
		return ReasonDaemonDown, true
	}
	return ReasonNotGPUShareNode, false
}

// Placer returns the Placer that places pod: policy's, with the node and
// GPU policies pod picks for itself (resource.PodPolicies, HAMi's
// annotations), or an error that says why pod's pick cannot be.
func Placer(policy *workload.Policy, pod *corev1.Pod) (*alloc.Placer, error) {
	node, gpu, err := resource.PodPolicies(pod)
	if err != nil {
		return nil, err
	}
	return policy.PlacerFor(node, gpu)
}

// Kept returns placer as it places pod at now: once pod has waited the
// policy's KeepFor since its creation, without keeping idle GPUs spare
// from it, so that no pod waits beside idle GPUs for longer.
func Kept(policy *workload.Policy, placer *alloc.Placer, pod *corev1.Pod, now time.Time) *alloc.Placer {
	if placer.Spare() == nil || now.Sub(pod.CreationTimestamp.Time) < policy.KeepFor() {
		return placer
	}
	return placer.Sparing(nil)
}
