package cache

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// Holds. A defragmentation plan sets GPU capacity aside for pods not yet
// scheduled: the waiting pod's place on the node the moves empty, and
// each moved pod's destination, for the replacement its controller makes.
// Held capacity is booked like a pod's: every other pod sees it taken.
// The pod a hold is for sees it free (HeldFor) and takes it when it is
// placed (PlaceAndAssumeHeld). A hold on the emptied node also takes in
// the bookings of the pods that leave it (its joins), as they end, so
// that no pod lands in the room they leave meanwhile.

// HoldFor names who may take a hold: one pod (the waiting pod), or any
// pod of Namespace whose controller is Owner (a moved pod's replacement;
// a controller reference names no namespace, so a pod elsewhere that
// names the same UID takes nothing).
type HoldFor struct {
	Pod, Owner types.UID
	Namespace  string
}

// Held is a hold a pod may take: its key, its node and what it holds
// there, summed per GPU.
type Held struct {
	Key       string
	Node      string
	Placement *alloc.Placement
}

type hold struct {
	plan, key string
	node      string
	who       HoldFor
	// parts are the entries that book the hold, under made-up UIDs.
	parts []types.UID
	// joins are the pods whose bookings become parts as they end.
	joins []types.UID
}

// ErrHoldExists is returned by Hold for a key already held.
var ErrHoldExists = errors.New("the hold exists")

// Hold books p (on p.Node; it may book nothing) for who under key, in the
// plan of that name, and makes the bookings of the pods joins join it as
// they end. It fails, holding nothing, if p does not fit.
func (c *Cache) Hold(plan, key string, who HoldFor, p *alloc.Placement, joins []types.UID) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds[key] != nil {
		return fmt.Errorf("%w: %s", ErrHoldExists, key)
	}
	h := &hold{plan: plan, key: key, node: p.Node, who: who}
	if len(p.Booked) > 0 || p.CPUMilli > 0 || p.MemoryMiB > 0 {
		uid := types.UID("hold/" + key)
		if err := c.assumeLocked(uid, "hold "+key, p); err != nil {
			return err
		}
		h.parts = append(h.parts, uid)
	}
	for _, j := range joins {
		if _, taken := c.joining[j]; !taken {
			c.joining[j] = key
			h.joins = append(h.joins, j)
		}
	}
	c.holds[key] = h
	return nil
}

// joinLocked makes the booking of pod uid, which ends, a part of the hold
// it joins; it reports whether it did. c.mu must be held.
func (c *Cache) joinLocked(uid types.UID) bool {
	key, ok := c.joining[uid]
	if !ok {
		return false
	}
	delete(c.joining, uid)
	h := c.holds[key]
	p := c.pods[uid]
	if h == nil || p == nil || p.invalid || p.conflict || p.placement == nil || p.node != h.node {
		return false
	}
	e := c.nodes[p.node]
	if e == nil || e.pods.get(uid) != p {
		return false
	}
	// The node's state is unchanged: the same booking, held by another.
	part := types.UID("hold/" + key + "/" + string(uid))
	e.pods.remove(uid)
	delete(c.pods, uid)
	entry := &podEntry{key: "hold " + key, node: p.node, placement: p.placement, assumed: true}
	e.pods.set(part, entry)
	c.pods[part] = entry
	h.parts = append(h.parts, part)
	return true
}

// HeldFor returns the holds pod, of namespace ns and controller owner
// ("" for none), may take, at most one per node.
func (c *Cache) HeldFor(pod, owner types.UID, ns string) []Held {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.holds) == 0 {
		return nil
	}
	var out []Held
	for _, key := range c.sortedHoldsLocked() {
		h := c.holds[key]
		if !h.isFor(pod, owner, ns) || slices.ContainsFunc(out, func(o Held) bool { return o.Node == h.node }) {
			continue
		}
		out = append(out, Held{Key: key, Node: h.node, Placement: c.heldLocked(h)})
	}
	return out
}

func (h *hold) isFor(pod, owner types.UID, ns string) bool {
	return (h.who.Pod != "" && h.who.Pod == pod) || (h.who.Owner != "" && h.who.Owner == owner && h.who.Namespace == ns)
}

func (c *Cache) sortedHoldsLocked() []string {
	keys := make([]string, 0, len(c.holds))
	for k := range c.holds {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// heldLocked sums what h's parts book, per GPU.
func (c *Cache) heldLocked(h *hold) *alloc.Placement {
	out := &alloc.Placement{Node: h.node}
	for _, uid := range h.parts {
		p := c.pods[uid]
		if p == nil || p.placement == nil {
			continue
		}
		out.CPUMilli += p.placement.CPUMilli
		out.MemoryMiB += p.placement.MemoryMiB
		addBooked(out, p.placement.Booked)
	}
	slices.SortFunc(out.Booked, func(a, b alloc.Assignment) int { return a.GPU - b.GPU })
	return out
}

// dropLocked releases hold h. c.mu must be held.
func (c *Cache) dropLocked(h *hold) {
	for _, uid := range h.parts {
		if p := c.pods[uid]; p != nil {
			c.unbook(uid, p)
			delete(c.pods, uid)
		}
	}
	for _, j := range h.joins {
		if c.joining[j] == h.key {
			delete(c.joining, j)
		}
	}
	delete(c.holds, h.key)
}

// PlaceAndAssumeHeld is PlaceAndAssume for a pod that may take the holds
// keys (HeldFor): placed on the node of one of them, the pod sees that
// hold free and takes it; placed elsewhere, it gives up the first, which
// it no longer needs. It returns the key of the hold taken or given up.
func (c *Cache) PlaceAndAssumeHeld(uid types.UID, placer *alloc.Placer, node string, pod *alloc.PodRequest, keys []string) (*alloc.Placement, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.nodes[node]
	if e == nil {
		return nil, "", fmt.Errorf("%w: %s", ErrNodeGone, node)
	}
	if err := c.daemons.down(node, c.now); err != nil {
		return nil, "", err
	}
	var taken *hold
	for _, k := range keys {
		if h := c.holds[k]; h != nil && h.node == node {
			taken = h
			break
		}
	}
	state := e.state
	if taken != nil || c.pods[uid] != nil {
		state = state.Clone()
	}
	if old := c.pods[uid]; old != nil && old.node == node && !old.invalid && !old.conflict {
		_ = state.Release(old.placement)
	}
	if taken != nil {
		if err := state.Release(c.heldLocked(taken)); err != nil {
			return nil, "", fmt.Errorf("releasing hold %s: %w", taken.key, err)
		}
	}
	p, unfit := placer.Place(state, pod)
	if unfit != nil {
		return nil, "", unfit
	}
	if taken == nil {
		for _, k := range keys {
			if taken = c.holds[k]; taken != nil {
				break
			}
		}
	}
	key := ""
	if taken != nil {
		key = taken.key
		c.dropLocked(taken)
	}
	if err := c.assumeLocked(uid, pod.Key, p); err != nil {
		return nil, key, err
	}
	return p, key, nil
}

// PlanHolds returns the keys of the holds plan still has.
func (c *Cache) PlanHolds(plan string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for _, k := range c.sortedHoldsLocked() {
		if c.holds[k].plan == plan {
			out = append(out, k)
		}
	}
	return out
}

// DropPlan releases every hold of plan and returns their keys.
func (c *Cache) DropPlan(plan string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, k := range c.sortedHoldsLocked() {
		if h := c.holds[k]; h.plan == plan {
			c.dropLocked(h)
			out = append(out, k)
		}
	}
	return out
}
