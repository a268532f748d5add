package inspect

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/defrag"
)

// DefragInput is what the defragmentation dry run reads: the cluster as
// Build reads it (Requests must be set), the namespaces (their opt-in
// label) and the disruption budgets.
type DefragInput struct {
	Input
	Namespaces []corev1.Namespace
	PDBs       []policyv1.PodDisruptionBudget
	// Placer places the waiting and the moved pods: the cluster's policy.
	Placer *alloc.Placer
	Budget alloc.DefragBudget
	Seed   uint64
}

// Defrag is, for each pod that waits for GPUs, what would move to make
// room for it. Nothing changes: each plan is made alone, on the cluster
// as it is.
type Defrag struct {
	Waiting []Waiting `json:"waiting"`
}

// Waiting is one pod that waits for GPUs and its plan.
type Waiting struct {
	Pod      string `json:"pod"`
	Priority int32  `json:"priority"`
	// Outcome is fits (a node has room now), plan (Moves make room on
	// Node) or none (Reason says why).
	Outcome  string        `json:"outcome"`
	Node     string        `json:"node,omitempty"`
	GPUs     []int         `json:"gpus,omitempty"`
	Moves    []PlannedMove `json:"moves,omitempty"`
	MovedMiB int64         `json:"movedMiB,omitempty"`
	Reason   string        `json:"reason,omitempty"`
}

// PlannedMove is one pod a plan would move, from its GPUs on one node to
// GPUs of another.
type PlannedMove struct {
	Pod       string `json:"pod"`
	From      string `json:"from"`
	FromGPUs  []int  `json:"fromGPUs"`
	To        string `json:"to"`
	ToGPUs    []int  `json:"toGPUs"`
	MemoryMiB int64  `json:"memoryMiB"`
}

// running is a booked pod that a plan might move.
type running struct {
	pod       *corev1.Pod
	node      int
	req       *alloc.PodRequest
	placement *alloc.Placement
}

// BuildDefrag plans, for each pod that waits for GPUs (unbound, asking
// GPUs of the resource model, most important first), the moves that
// would make room for it (alloc.Placer.PlanDefrag) among the pods
// defrag.MayMove lets move and their budgets allow.
func BuildDefrag(in DefragInput) (*Defrag, error) {
	if in.Requests == nil || in.Placer == nil {
		return nil, errors.New("the defragmentation dry run needs the resource model and the policy")
	}
	l := load(in.Input)
	var states []*alloc.NodeState
	index := map[string]int{}
	for _, name := range slices.Sorted(maps.Keys(l.nodes)) {
		if l.cache.ReadBooked(name, func(s *alloc.NodeState) { states = append(states, s.Clone()) }) == nil {
			index[name] = len(states) - 1
		}
	}
	var booked []running
	for _, p := range l.recorded {
		if _, bad := l.refused[p.UID]; bad {
			continue
		}
		placement, _ := l.cache.Holding(p.UID)
		req, err := in.Requests(p)
		if placement == nil || err != nil || req == nil {
			continue
		}
		if i, ok := index[placement.Node]; ok {
			booked = append(booked, running{pod: p, node: i, req: req, placement: placement})
		}
	}
	namespaces := map[string]*corev1.Namespace{}
	for i := range in.Namespaces {
		namespaces[in.Namespaces[i].Name] = &in.Namespaces[i]
	}
	type waiting struct {
		pod *corev1.Pod
		req *alloc.PodRequest
	}
	var queue []waiting
	for i := range in.Pods {
		p := &in.Pods[i]
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || (p.Status.Phase != "" && p.Status.Phase != corev1.PodPending) {
			continue
		}
		if req, err := in.Requests(p); err == nil && req != nil && req.GPUs() {
			queue = append(queue, waiting{pod: p, req: req})
		}
	}
	slices.SortFunc(queue, func(a, b waiting) int {
		return cmp.Or(-cmp.Compare(defrag.Priority(a.pod), defrag.Priority(b.pod)), cmp.Compare(a.req.Key, b.req.Key))
	})
	out := &Defrag{Waiting: []Waiting{}}
	for _, w := range queue {
		v := Waiting{Pod: w.req.Key, Priority: defrag.Priority(w.pod)}
		if d := in.Placer.Pick(states, w.req, in.Seed); d.Placement != nil {
			v.Outcome, v.Node, v.GPUs = "fits", states[d.Index].Node.Name, gpuIndexes(states[d.Index], d.Placement)
			out.Waiting = append(out.Waiting, v)
			continue
		}
		var movable []alloc.Movable
		byKey := map[string]*running{}
		var why defrag.Refusals
		for i := range booked {
			r := &booked[i]
			if err := defrag.Check(r.pod, namespaces[r.pod.Namespace], v.Priority, in.PDBs); err != nil {
				why.Add(err)
				continue
			}
			key := r.pod.Namespace + "/" + r.pod.Name
			byKey[key] = r
			movable = append(movable, alloc.Movable{Key: key, Node: r.node, Request: r.req, Placement: r.placement})
		}
		v.Outcome = "none"
		plan := in.Placer.PlanDefrag(states, w.req, movable, in.Budget, in.Seed)
		switch {
		case len(movable) == 0:
			v.Reason = "no pod may move" + refused(&why)
		case plan == nil:
			v.Reason = fmt.Sprintf("no plan of at most %d moves: the %d pods that may move free no node that would take it, or fit no other node", in.Budget.MaxMoves, len(movable))
		default:
			pods := make([]*corev1.Pod, 0, len(plan.Moves))
			for _, m := range plan.Moves {
				pods = append(pods, byKey[m.Key].pod)
			}
			if err := defrag.Budgets(pods, in.PDBs); err != nil {
				v.Reason = err.Error()
				break
			}
			v.Outcome, v.Node, v.MovedMiB = "plan", states[plan.Target].Node.Name, plan.MovedMiB
			v.GPUs = gpuIndexes(states[plan.Target], plan.Placement)
			for _, m := range plan.Moves {
				r := byKey[m.Key]
				v.Moves = append(v.Moves, PlannedMove{Pod: m.Key, From: states[m.From].Node.Name, FromGPUs: gpuIndexes(states[m.From], r.placement),
					To: states[m.To].Node.Name, ToGPUs: gpuIndexes(states[m.To], m.Placement), MemoryMiB: r.placement.BookedMiB()})
			}
		}
		out.Waiting = append(out.Waiting, v)
	}
	return out, nil
}

// gpuIndexes are the indexes, on s's node, of the GPUs p books.
func gpuIndexes(s *alloc.NodeState, p *alloc.Placement) []int {
	var out []int
	for _, b := range p.Booked {
		if b.GPU >= 0 && b.GPU < len(s.Node.GPUs) {
			out = append(out, s.Node.GPUs[b.GPU].Index)
		}
	}
	slices.Sort(out)
	return out
}

// refused says why no pod may move, and how a pod opts in.
func refused(why *defrag.Refusals) string {
	if s := why.String(); s != "" {
		return s + "; a pod moves if it opts in with the label " + defrag.OptIn + "=true on it or its namespace"
	}
	return ": none is booked"
}

// WriteDefrag writes each waiting pod's plan.
func WriteDefrag(out io.Writer, d *Defrag, u Unit) error {
	fmt.Fprintln(out, "Dry run: nothing moves. Each plan is made alone, on the cluster as it is.")
	fmt.Fprintln(out)
	if len(d.Waiting) == 0 {
		fmt.Fprintln(out, "No pod waits for GPUs.")
		return nil
	}
	w := newTable(out)
	w.row("POD", "PRIORITY", "PLAN")
	for _, v := range d.Waiting {
		var plan string
		switch v.Outcome {
		case "fits":
			plan = fmt.Sprintf("fits now on %s (GPU %s): no move needed", v.Node, joinInts(v.GPUs))
		case "plan":
			var moves []string
			for _, m := range v.Moves {
				moves = append(moves, fmt.Sprintf("%s from %s (GPU %s) to %s (GPU %s)", m.Pod, m.From, joinInts(m.FromGPUs), m.To, joinInts(m.ToGPUs)))
			}
			plan = fmt.Sprintf("move %d pod(s), %s %s: %s; then on %s (GPU %s)", len(v.Moves), u.Format(v.MovedMiB), u,
				strings.Join(moves, ", "), v.Node, joinInts(v.GPUs))
		default:
			plan = "none: " + v.Reason
		}
		w.row(v.Pod, fmt.Sprint(v.Priority), plan)
	}
	return w.flush()
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
