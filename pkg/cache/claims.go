package cache

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/dra/claim"
)

// SetClaim books what ResourceClaim rc's allocation holds of gpushare's
// DRA devices (driver gpu.gpushare.io, device gpu-<index> of the node's
// pool) on the GPUs of that index, under the claim's UID: one account per
// GPU for claims and extended-resource pods, so that neither scheduler
// path places a share on memory the other holds. A claim that is not
// allocated, or holds none of them, books nothing. The pods it is
// reserved for drop what the scheduler assumed for them: the claim books
// it now.
func (c *Cache) SetClaim(rc *resourceapi.ResourceClaim) {
	node, gpus, err := claim.Held(rc)
	if err != nil {
		c.logger.Error(err, "Ignoring the claim's allocation", "claim", klog.KObj(rc))
	}
	if node == "" {
		c.RemoveClaim(rc.UID)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range rc.Status.ReservedFor {
		if r.Resource != "pods" {
			continue
		}
		if p := c.pods[r.UID]; p != nil && p.assumed && p.alloc == nil {
			c.unbook(r.UID, p)
			delete(c.pods, r.UID)
		}
	}
	old := c.pods[rc.UID]
	if old != nil && old.node == node && slices.Equal(old.claim, gpus) {
		return
	}
	if old != nil {
		c.unbook(rc.UID, old)
	}
	p := &podEntry{key: "ResourceClaim " + rc.Namespace + "/" + rc.Name, node: node, claim: gpus}
	c.pods[rc.UID] = p
	if e := c.nodes[node]; e != nil {
		e.pods[rc.UID] = p
		c.book(e, p)
	}
}

// RemoveClaim releases what a claim held: it was deallocated or deleted.
func (c *Cache) RemoveClaim(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pods[uid]; p != nil && p.claim != nil {
		c.unbook(uid, p)
		delete(c.pods, uid)
	}
}

// claimPlacement is what a claim's GPUs book on node: a GPU taken whole
// books all its memory and compute.
func claimPlacement(p *podEntry, node *alloc.Node) (*alloc.Placement, error) {
	pl := &alloc.Placement{Node: node.Name}
	for _, g := range p.claim {
		if g.Index >= len(node.GPUs) {
			return nil, fmt.Errorf("%s holds GPU %d of node %s, which lists %d", p.key, g.Index, node.Name, len(node.GPUs))
		}
		u := alloc.Usage{MemoryMiB: g.MemoryMiB, Compute: g.Compute}
		if gpu := node.GPUs[g.Index]; g.Whole {
			u = alloc.Usage{MemoryMiB: gpu.MemoryMiB, Compute: gpu.ComputeCapacity()}
		}
		pl.Booked = append(pl.Booked, alloc.Assignment{GPU: g.Index, UUID: node.GPUs[g.Index].UUID, Usage: u})
	}
	slices.SortFunc(pl.Booked, func(a, b alloc.Assignment) int { return a.GPU - b.GPU })
	return pl, nil
}
