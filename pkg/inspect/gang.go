package inspect

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// GangInput is what the gang view reads: the cluster as Build reads it
// (Requests must be set), the PodGroups, and the policy's Placer, which
// places the waiting pods in the dry run.
type GangInput struct {
	Input
	Groups []schedulingv1beta1.PodGroup
	Placer *alloc.Placer
	Seed   uint64
}

// Gang is one PodGroup with a gang policy: its pods, how many are bound,
// kube-scheduler's word on it, and gpushare's on its GPUs.
type Gang struct {
	Name     string `json:"name"`
	MinCount int32  `json:"minCount"`
	Pods     int    `json:"pods"`
	Bound    int    `json:"bound"`
	// State is the reason of the PodGroup's PodGroupInitiallyScheduled
	// condition (Scheduled, Unschedulable, SchedulerError), "" before
	// any try; Message its message.
	State   string `json:"state,omitempty"`
	Message string `json:"message,omitempty"`
	// Verdict is gpushare's reading of a gang that waits: placed, fits
	// now, waits for room, or never fits; Why says it in numbers.
	Verdict string `json:"verdict"`
	Why     string `json:"why,omitempty"`
}

// The verdicts on a gang.
const (
	GangPlaced   = "placed"
	GangFitsNow  = "fits now"
	GangWaits    = "waits for room"
	GangNever    = "never fits"
	GangTooFew   = "too few pods"
	GangNotShare = "no GPU pods"
)

// BuildGangs returns the gangs, in name order, each with a dry run of its
// waiting pods on the GPUs as they are and as they would be with every
// GPU free: how many of the pods it still needs fit at once.
func BuildGangs(in GangInput) ([]Gang, error) {
	if in.Requests == nil || in.Placer == nil {
		return nil, errors.New("the gang view needs the resource model and the policy")
	}
	l := load(in.Input)
	var now, empty []*alloc.NodeState
	for _, name := range slices.Sorted(maps.Keys(l.nodes)) {
		_ = l.cache.ReadBooked(name, func(s *alloc.NodeState) {
			now = append(now, s.Clone())
			empty = append(empty, alloc.NewNodeState(s.Node))
		})
	}
	members := map[string][]*corev1.Pod{}
	for i := range in.Pods {
		p := &in.Pods[i]
		if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil || p.DeletionTimestamp != nil {
			continue
		}
		key := p.Namespace + "/" + *p.Spec.SchedulingGroup.PodGroupName
		members[key] = append(members[key], p)
	}
	out := []Gang{}
	for i := range in.Groups {
		g := &in.Groups[i]
		if g.Spec.SchedulingPolicy.Gang == nil {
			continue
		}
		v := Gang{Name: g.Namespace + "/" + g.Name, MinCount: g.Spec.SchedulingPolicy.Gang.MinCount}
		if c := apimeta.FindStatusCondition(g.Status.Conditions, "PodGroupInitiallyScheduled"); c != nil {
			v.State, v.Message = c.Reason, c.Message
		}
		pods := members[v.Name]
		slices.SortFunc(pods, func(a, b *corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
		var waiting []*alloc.PodRequest
		var invalid error
		// plain are the waiting pods that ask no GPUs: gpushare does
		// not judge them, and counts them as fitting.
		plain := 0
		for _, p := range pods {
			v.Pods++
			if p.Spec.NodeName != "" {
				v.Bound++
				continue
			}
			req, err := in.Requests(p)
			switch {
			case err != nil:
				invalid = cmp.Or(invalid, fmt.Errorf("pod %s: %w", p.Name, err))
			case req != nil && req.GPUs():
				waiting = append(waiting, req)
			default:
				plain++
			}
		}
		need := int(v.MinCount) - v.Bound
		switch {
		case need <= 0:
			v.Verdict = GangPlaced
		case invalid != nil:
			v.Verdict = GangNever
			v.Why = invalid.Error()
		case v.Pods-v.Bound < need:
			v.Verdict = GangTooFew
			v.Why = fmt.Sprintf("%d pod(s) exist of the %d it needs", v.Pods, v.MinCount)
		case len(waiting) == 0:
			v.Verdict = GangNotShare
			v.Why = "its waiting pods ask no GPUs of gpushare: kube-scheduler's reasons are the ones"
		default:
			fitNow := min(need, plain+fitTogether(now, waiting, need-min(need, plain), in.Placer, in.Seed))
			fitEmpty := min(need, plain+fitTogether(empty, waiting, need-min(need, plain), in.Placer, in.Seed))
			switch {
			case fitNow >= need:
				v.Verdict = GangFitsNow
				v.Why = fmt.Sprintf("the %d pod(s) it needs fit the GPUs as they are; if it still waits, GPUs are not why: "+
					"see its condition and its pods' events (node selectors, affinity, one schedulerName for all)", need)
			case fitEmpty < need:
				v.Verdict = GangNever
				v.Why = fmt.Sprintf("even with every GPU free, %d of the %d pod(s) it needs fit at once", fitEmpty, need)
			default:
				v.Verdict = GangWaits
				v.Why = fmt.Sprintf("%d of the %d pod(s) it needs fit the GPUs as they are; none binds until all do", fitNow, need)
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b Gang) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// fitTogether places reqs one after another on copies of states, each
// on the room the earlier ones left, and returns how many fit, at most
// need.
func fitTogether(states []*alloc.NodeState, reqs []*alloc.PodRequest, need int, placer *alloc.Placer, seed uint64) int {
	work := make([]*alloc.NodeState, len(states))
	for i, s := range states {
		work[i] = s.Clone()
	}
	n := 0
	for _, r := range reqs {
		if n == need {
			break
		}
		d := placer.Pick(work, r, seed)
		if d.Placement == nil || work[d.Index].Apply(d.Placement) != nil {
			continue
		}
		n++
	}
	return n
}

// WriteGangs writes one row per gang and, for each that waits, why.
func WriteGangs(out io.Writer, gangs []Gang) error {
	if len(gangs) == 0 {
		_, err := fmt.Fprintln(out, "No PodGroup with a gang policy.")
		return err
	}
	w := newTable(out)
	w.row("PODGROUP", "MIN", "PODS", "BOUND", "STATE", "GPUSHARE")
	for _, g := range gangs {
		verdict := g.Verdict
		if g.Why != "" {
			verdict += ": " + g.Why
		}
		w.row(g.Name, strconv.Itoa(int(g.MinCount)), strconv.Itoa(g.Pods), strconv.Itoa(g.Bound), orDash(g.State), verdict)
	}
	return w.flush()
}
