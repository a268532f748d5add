package alloc

import (
	"cmp"
	"slices"
)

// Movable is a pod a defragmentation plan may move: the node it is on
// (an index into the states PlanDefrag reads), what it asks and where it
// is booked there. Who may move (opted in, recreated by a controller,
// within its disruption budget, not above the waiting pod's priority) is
// the caller's to decide.
type Movable struct {
	Key       string
	Node      int
	Request   *PodRequest
	Placement *Placement
	// Fits, if set, says whether the pod may run on a node (its node
	// selector, affinity, tolerations): it is moved only to one.
	Fits func(node int) bool
}

// Move is one pod a plan moves: from node From to node To, where it gets
// Placement.
type Move struct {
	Key       string
	From, To  int
	Placement *Placement
}

// DefragPlan makes room for a pod that fits no node: the Moves, made in
// order, then the pod's Placement on node Target. MovedMiB is the GPU
// memory the moved pods hold.
type DefragPlan struct {
	Target    int
	Placement *Placement
	Moves     []Move
	MovedMiB  int64
}

// DefragBudget bounds a plan and the work of finding it.
type DefragBudget struct {
	// MaxMoves is the most pods one plan moves (at least 1).
	MaxMoves int
	// MaxTargets is the most nodes tried as the pod's node, those with
	// the least movable GPU memory first; 0 tries every node where the
	// pod would fit without its movable pods.
	MaxTargets int
	// Fits, if set, says whether the waiting pod may run on a node (its
	// node selector, affinity, tolerations): only such nodes are made
	// room on.
	Fits func(node int) bool
}

// PlanDefrag returns the cheapest plan within budget that makes room for
// pod by moving some of movable, or nil if there is none (or pod fits
// already: place it instead). Cost is counted in pods moved, then GPU
// memory moved. For each node that would take pod without its movable
// pods, the pods to move are those PlanVictims would evict there (the
// fewest, then the least memory); each must find a node where it fits
// other than the one it leaves, placed by pl's policy over the states as
// the plan's earlier moves leave them. states are not changed.
func (pl *Placer) PlanDefrag(states []*NodeState, pod *PodRequest, movable []Movable, b DefragBudget, seed uint64) *DefragPlan {
	if b.MaxMoves < 1 || len(movable) == 0 {
		return nil
	}
	r := pl.NewRater(pod, seed)
	byNode := map[int][]int{}
	for i := range movable {
		m := &movable[i]
		if m.Node >= 0 && m.Node < len(states) && m.Placement != nil && len(m.Placement.Booked) > 0 {
			byNode[m.Node] = append(byNode[m.Node], i)
		}
	}
	type target struct {
		node  int
		base  *NodeState
		mib   int64
		moves []int
	}
	var targets []target
	for node, ms := range byNode {
		if b.Fits != nil && !b.Fits(node) {
			continue
		}
		base := states[node].Clone()
		var mib int64
		ok := true
		for _, i := range ms {
			if base.Release(movable[i].Placement) != nil {
				ok = false
				break
			}
			mib += movable[i].Placement.BookedMiB()
		}
		if !ok {
			continue
		}
		if _, unfit := r.Rate(base); unfit == nil {
			targets = append(targets, target{node: node, base: base, mib: mib, moves: ms})
		}
	}
	slices.SortFunc(targets, func(a, b target) int { return cmp.Or(cmp.Compare(a.mib, b.mib), cmp.Compare(a.node, b.node)) })
	if b.MaxTargets > 0 && len(targets) > b.MaxTargets {
		targets = targets[:b.MaxTargets]
	}
	var best *DefragPlan
	for _, t := range targets {
		candidates := make([]Candidate, 0, len(t.moves))
		for _, i := range t.moves {
			candidates = append(candidates, Candidate{Key: movable[i].Key, Placement: movable[i].Placement})
		}
		victims := PlanVictims(r, t.base, candidates, nil).Victims
		if len(victims) == 0 || len(victims) > b.MaxMoves || (best != nil && len(victims) > len(best.Moves)) {
			continue
		}
		if p := pl.destinations(states, t.node, pod, movable, t.moves, victims, seed); p != nil &&
			(best == nil || len(p.Moves) < len(best.Moves) || (len(p.Moves) == len(best.Moves) && p.MovedMiB < best.MovedMiB)) {
			best = p
		}
	}
	return best
}

// destinations finds a node for each victim on node target, the largest
// first, in order over the states the moves before leave, and then the
// pod's placement on target; nil if a victim fits nowhere else.
func (pl *Placer) destinations(states []*NodeState, target int, pod *PodRequest, movable []Movable, on []int, victims map[string]bool, seed uint64) *DefragPlan {
	var moving []int
	for _, i := range on {
		if victims[movable[i].Key] {
			moving = append(moving, i)
		}
	}
	slices.SortStableFunc(moving, func(a, b int) int {
		return -cmp.Compare(movable[a].Placement.BookedMiB(), movable[b].Placement.BookedMiB())
	})
	// view is states without target; work holds the copies moves change.
	view := make([]*NodeState, 0, len(states)-1)
	index := make([]int, 0, len(states)-1)
	for i, s := range states {
		if i != target {
			view, index = append(view, s), append(index, i)
		}
	}
	there := states[target].Clone()
	plan := &DefragPlan{Target: target}
	copied := map[int]bool{}
	for _, i := range moving {
		m := &movable[i]
		if there.Release(m.Placement) != nil {
			return nil
		}
		// The nodes the pod may run on, of view.
		fit, at := view, []int(nil)
		if m.Fits != nil {
			fit = nil
			for k := range view {
				if m.Fits(index[k]) {
					fit, at = append(fit, view[k]), append(at, k)
				}
			}
		}
		d := pl.Pick(fit, m.Request, seed)
		if d.Placement == nil {
			return nil
		}
		k := d.Index
		if at != nil {
			k = at[k]
		}
		if !copied[k] {
			view[k], copied[k] = view[k].Clone(), true
		}
		if view[k].Apply(d.Placement) != nil {
			return nil
		}
		plan.Moves = append(plan.Moves, Move{Key: m.Key, From: target, To: index[k], Placement: d.Placement})
		plan.MovedMiB += m.Placement.BookedMiB()
	}
	p, unfit := pl.Place(there, pod)
	if unfit != nil {
		return nil
	}
	plan.Placement = p
	return plan
}

// BookedMiB is the GPU memory p books.
func (p *Placement) BookedMiB() int64 {
	var mib int64
	for _, b := range p.Booked {
		mib += b.MemoryMiB
	}
	return mib
}
