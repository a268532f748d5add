package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// mover keeps the pods a replay placed and which of them may move, and
// moves them to make room for a pod that fits nowhere.
type mover struct {
	cfg  *Defrag
	rand *rand.Rand
	// pods are the placed pods that may move, by key.
	pods map[string]*movable
}

type movable struct {
	req       alloc.PodRequest
	node      int
	placement *alloc.Placement
}

func newMover(cfg *Defrag, seed uint64) *mover {
	return &mover{cfg: cfg, rand: rand.New(rand.NewPCG(seed, seed^0xdef7a6)), pods: map[string]*movable{}}
}

// placed records a pod placed as d says; it may move with the configured
// chance, if it has GPUs.
func (m *mover) placed(key string, req alloc.PodRequest, d alloc.Decision) {
	if m.rand.Float64() >= m.cfg.Movable || !req.GPUs() {
		return
	}
	m.pods[key] = &movable{req: req, node: d.Index, placement: d.Placement}
}

// pod returns a movable pod by key (where it is now), or nil.
func (m *mover) pod(key string) *movable {
	if m == nil {
		return nil
	}
	return m.pods[key]
}

// gone forgets a pod that left.
func (m *mover) gone(key string) { delete(m.pods, key) }

// makeRoom plans moves for req (alloc.Placer.PlanDefrag) and makes them
// on states; d is then the pod's placement. It returns the pods moved.
func (m *mover) makeRoom(pl *alloc.Placer, states []*alloc.NodeState, req *alloc.PodRequest, seed uint64, d *alloc.Decision) (int, error) {
	list := make([]alloc.Movable, 0, len(m.pods))
	for _, key := range slices.Sorted(maps.Keys(m.pods)) {
		p := m.pods[key]
		list = append(list, alloc.Movable{Key: key, Node: p.node, Request: &p.req, Placement: p.placement})
	}
	plan := pl.PlanDefrag(states, req, list, m.cfg.Budget, seed)
	if plan == nil {
		return 0, nil
	}
	for _, mv := range plan.Moves {
		p := m.pods[mv.Key]
		if err := states[mv.From].Release(p.placement); err != nil {
			return 0, fmt.Errorf("moving %s: %w", mv.Key, err)
		}
		if err := states[mv.To].Apply(mv.Placement); err != nil {
			return 0, fmt.Errorf("moving %s: %w", mv.Key, err)
		}
		p.node, p.placement = mv.To, mv.Placement
	}
	*d = alloc.Decision{Index: plan.Target, Placement: plan.Placement}
	return len(plan.Moves), nil
}
