package cache

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// Assume books a placement for a pod that is about to be recorded and
// bound, replacing anything the pod held. It fails if the node is gone or
// the placement no longer fits.
func (c *Cache) Assume(uid types.UID, key string, p *alloc.Placement) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.assumeLocked(uid, key, p)
}

func (c *Cache) assumeLocked(uid types.UID, key string, p *alloc.Placement) error {
	e := c.nodes[p.Node]
	if e == nil {
		return fmt.Errorf("%w: %s", ErrNodeGone, p.Node)
	}
	old := c.pods[uid]
	if old != nil {
		c.unbook(uid, old)
	}
	entry := &podEntry{key: key, node: p.Node, placement: p, assumed: true}
	if err := e.state.Apply(p); err != nil {
		// Book the old placement again, on its own node.
		if old != nil {
			if oe := c.nodes[old.node]; oe != nil {
				oe.pods.set(uid, old)
				c.book(oe, old)
			}
		}
		return err
	}
	e.resum()
	e.pods.set(uid, entry)
	c.pods[uid] = entry
	if old == nil {
		c.placedLocked(uid, e, p)
	}
	c.stopWaitingLocked(uid)
	return nil
}

// PlaceAndAssume places pod on the named node with placer, against the
// node's current bookings, and assumes the result, all under one lock, so
// that concurrent callers never book the same share twice.
func (c *Cache) PlaceAndAssume(uid types.UID, placer *alloc.Placer, node string, pod *alloc.PodRequest) (*alloc.Placement, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.nodes[node]
	if e == nil {
		return nil, fmt.Errorf("%w: %s", ErrNodeGone, node)
	}
	if err := c.daemons.down(node, c.now); err != nil {
		return nil, err
	}
	state := e.state
	if old := c.pods[uid]; old != nil && old.node == node && !old.invalid && !old.conflict {
		// Rating the node as if the pod's old booking were gone.
		state = state.Clone()
		_ = state.Release(old.placement)
	}
	p, unfit := placer.Place(state, pod)
	if unfit != nil {
		return nil, unfit
	}
	if err := c.assumeLocked(uid, pod.Key, p); err != nil {
		return nil, err
	}
	return p, nil
}

// Forget drops an assumed placement (the pod was not bound after all). A
// recorded placement stays: the record on the pod is the truth.
func (c *Cache) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pods[uid]; p != nil && p.assumed {
		c.releasedLocked(p)
		c.unbook(uid, p)
		delete(c.pods, uid)
	}
}
