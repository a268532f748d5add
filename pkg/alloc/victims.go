package alloc

import (
	"cmp"
	"maps"
	"slices"
)

// Candidate is a booking preemption may take back: a pod on the node,
// with its priority. PlanVictims reads a list of candidates most
// important first.
type Candidate struct {
	Key       string
	Priority  int64
	Placement *Placement
}

// VictimPlan is the candidates to evict (by Key) so that a pod fits,
// and the GPUs that frees; empty when none does, or none is needed.
type VictimPlan struct {
	Victims map[string]bool
	GPUs    []int
}

// PlanVictims chooses the candidates to evict so that the rater's pod
// fits on base with the others returned. For each GPU a candidate holds,
// it returns the candidates in an order that leaves that GPU for last; a
// candidate whose return makes the pod unfit is a victim. Of these sets
// of victims it keeps the cheapest (victimCost). violations counts the
// victims (keys, most important first) whose eviction a disruption
// budget forbids; nil counts none.
//
// The order: first the candidates that hold none of the GPU, those on
// GPUs dear to clear first (dear: what evicting all of a GPU's
// candidates costs), so that a pod that needs several GPUs gets the
// cheap ones besides; then those on the GPU. Within a GPU, the most
// important first. For a pod that needs one GPU, the victims are then
// all on the GPU left for last, as nothing else is returned while it is
// free.
func PlanVictims(r *Rater, base *NodeState, candidates []Candidate, violations func(victims []string) int) VictimPlan {
	none := VictimPlan{Victims: map[string]bool{}}
	if _, unfit := r.Rate(base); unfit != nil {
		return none
	}
	dear := map[int]victimCost{}
	for i := range candidates {
		for _, b := range candidates[i].Placement.Booked {
			dear[b.GPU] = dear[b.GPU].add(&candidates[i], b.MemoryMiB)
		}
	}
	// A candidate's key is its cheapest GPU: it goes early only if all
	// its GPUs are dear.
	cheapest := func(c *Candidate) int {
		g := c.Placement.Booked[0].GPU
		for _, b := range c.Placement.Booked[1:] {
			if dear[b.GPU].less(dear[g]) {
				g = b.GPU
			}
		}
		return g
	}
	// rank is the caller's order of importance.
	rank := make([]int, len(candidates))
	for i := range rank {
		rank[i] = i
	}
	slices.SortStableFunc(rank, func(i, j int) int {
		a, b := &candidates[i], &candidates[j]
		if len(a.Placement.Booked) == 0 || len(b.Placement.Booked) == 0 {
			return -cmp.Compare(len(a.Placement.Booked), len(b.Placement.Booked))
		}
		ga, gb := cheapest(a), cheapest(b)
		switch {
		case ga == gb:
			return 0
		case dear[gb].less(dear[ga]):
			return -1
		case dear[ga].less(dear[gb]):
			return 1
		}
		return cmp.Compare(ga, gb)
	})
	var (
		best     *VictimPlan
		bestCost victimCost
	)
	for _, g := range slices.Sorted(maps.Keys(dear)) {
		order := make([]*Candidate, 0, len(candidates))
		for _, i := range rank {
			if !holdsGPU(&candidates[i], g) {
				order = append(order, &candidates[i])
			}
		}
		for _, i := range rank {
			if holdsGPU(&candidates[i], g) {
				order = append(order, &candidates[i])
			}
		}
		plan, cost := reprieve(r, base, order, candidates, violations)
		if best == nil || cost.less(bestCost) {
			best, bestCost = &plan, cost
		}
	}
	if best == nil {
		// No candidate holds a GPU: evicting them frees none.
		return none
	}
	return *best
}

// reprieve returns the candidates in order to a copy of base, keeping
// each one the pod still fits beside; the others are the victims.
func reprieve(r *Rater, base *NodeState, order []*Candidate, all []Candidate, violations func([]string) int) (VictimPlan, victimCost) {
	work := base.Clone()
	plan := VictimPlan{Victims: map[string]bool{}}
	var cost victimCost
	freed := map[int]bool{}
	for _, c := range order {
		if work.Apply(c.Placement) == nil {
			if _, unfit := r.Rate(work); unfit == nil {
				continue
			}
			_ = work.Release(c.Placement)
		}
		plan.Victims[c.Key] = true
		var mib int64
		for _, b := range c.Placement.Booked {
			mib += b.MemoryMiB
			freed[b.GPU] = true
		}
		cost = cost.add(c, mib)
	}
	if violations != nil && len(plan.Victims) > 0 {
		victims := make([]string, 0, len(plan.Victims))
		for i := range all {
			if plan.Victims[all[i].Key] {
				victims = append(victims, all[i].Key)
			}
		}
		cost.violations = violations(victims)
	}
	plan.GPUs = slices.Sorted(maps.Keys(freed))
	if len(plan.GPUs) > 0 {
		cost.gpu = plan.GPUs[0]
	}
	return plan, cost
}

// victimCost orders victim sets, cheapest first: the fewest evictions a
// disruption budget forbids, then the lowest highest priority, then the
// fewest pods, then the lowest sum of priorities, then the least GPU
// memory, then the lowest GPU.
type victimCost struct {
	violations   int
	highest, sum int64
	pods         int
	memory       int64
	gpu          int
}

// add is the cost with c evicted too, freeing mib of GPU memory.
func (a victimCost) add(c *Candidate, mib int64) victimCost {
	if a.pods == 0 || c.Priority > a.highest {
		a.highest = c.Priority
	}
	a.pods++
	a.sum += c.Priority
	a.memory += mib
	return a
}

func (a victimCost) less(b victimCost) bool {
	return cmp.Or(
		cmp.Compare(a.violations, b.violations),
		compareHighest(a, b),
		cmp.Compare(a.pods, b.pods),
		cmp.Compare(a.sum, b.sum),
		cmp.Compare(a.memory, b.memory),
		cmp.Compare(a.gpu, b.gpu),
	) < 0
}

// compareHighest compares the highest priorities of two victim sets; an
// empty set is the cheapest.
func compareHighest(a, b victimCost) int {
	if a.pods == 0 || b.pods == 0 {
		return cmp.Compare(a.pods, b.pods)
	}
	return cmp.Compare(a.highest, b.highest)
}

func holdsGPU(c *Candidate, gpu int) bool {
	for _, b := range c.Placement.Booked {
		if b.GPU == gpu {
			return true
		}
	}
	return false
}
