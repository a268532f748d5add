package cache

import (
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/claim"
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
	var owner types.UID
	var ownerName string
	pods := 0
	for _, r := range rc.Status.ReservedFor {
		if r.Resource != "pods" {
			continue
		}
		pods++
		owner, ownerName = r.UID, r.Name
		if p := c.pods[r.UID]; p != nil && p.assumed {
			c.unbook(r.UID, p)
			delete(c.pods, r.UID)
		}
	}
	if gone, ok := c.released[rc.UID]; ok {
		if !slices.ContainsFunc(rc.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID != gone }) {
			// Its pod is gone; it is being deallocated.
			return
		}
		delete(c.released, rc.UID)
	}
	if pods != 1 {
		owner, ownerName = "", ""
	}
	old := c.pods[rc.UID]
	if old != nil && old.node == node && slices.Equal(old.claim, gpus) {
		c.setOwner(rc.UID, old, owner)
		old.ownerName = ownerName
		return
	}
	if old != nil {
		c.unbook(rc.UID, old)
		c.setOwner(rc.UID, old, "")
	}
	p := &podEntry{key: "ResourceClaim " + rc.Namespace + "/" + rc.Name, node: node, claim: gpus, ownerName: ownerName}
	c.setOwner(rc.UID, p, owner)
	c.pods[rc.UID] = p
	if e := c.nodes[node]; e != nil {
		e.pods.set(rc.UID, p)
		c.book(e, p)
	}
}

// RemoveClaim releases what a claim held: it was deallocated or deleted.
func (c *Cache) RemoveClaim(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.released, uid)
	if p := c.pods[uid]; p != nil && p.claim != nil {
		c.unbook(uid, p)
		c.setOwner(uid, p, "")
		delete(c.pods, uid)
	}
}

// releaseClaimsLocked frees the claims reserved for pod alone: the pod is
// gone, and DRA deallocates them.
func (c *Cache) releaseClaimsLocked(pod types.UID) {
	for _, uid := range slices.Clone(c.claimsOf[pod]) {
		if p := c.pods[uid]; p != nil {
			c.unbook(uid, p)
			c.setOwner(uid, p, "")
			delete(c.pods, uid)
			c.released[uid] = pod
		}
	}
}

// setOwner records that claim entry p (of UID uid) is reserved for pod
// owner alone ("" for none or several).
func (c *Cache) setOwner(uid types.UID, p *podEntry, owner types.UID) {
	if p.owner == owner {
		return
	}
	if p.owner != "" {
		c.claimsOf[p.owner] = slices.DeleteFunc(c.claimsOf[p.owner], func(u types.UID) bool { return u == uid })
		if len(c.claimsOf[p.owner]) == 0 {
			delete(c.claimsOf, p.owner)
		}
	}
	p.owner = owner
	if owner != "" {
		c.claimsOf[owner] = append(c.claimsOf[owner], uid)
	}
}

// HoldingOf returns what evicting pod uid would free: its own booking and
// those of the claims reserved for it alone, on one node, summed per GPU;
// nil if it holds nothing.
func (c *Cache) HoldingOf(uid types.UID) *alloc.Placement {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out *alloc.Placement
	add := func(e *podEntry) {
		if e == nil || e.invalid || e.placement == nil {
			return
		}
		if out == nil {
			out = &alloc.Placement{Node: e.placement.Node, CPUMilli: e.placement.CPUMilli, MemoryMiB: e.placement.MemoryMiB,
				Containers: e.placement.Containers, Booked: slices.Clone(e.placement.Booked)}
			return
		}
		if e.placement.Node != out.Node {
			return
		}
		addBooked(out, e.placement.Booked)
	}
	add(c.pods[uid])
	for _, cu := range c.claimsOf[uid] {
		add(c.pods[cu])
	}
	if out != nil {
		slices.SortFunc(out.Booked, func(a, b alloc.Assignment) int { return a.GPU - b.GPU })
	}
	return out
}

// addBooked adds booked to out's bookings, summed per GPU.
func addBooked(out *alloc.Placement, booked []alloc.Assignment) {
	for _, b := range booked {
		i := slices.IndexFunc(out.Booked, func(a alloc.Assignment) bool { return a.GPU == b.GPU })
		if i < 0 {
			out.Booked = append(out.Booked, b)
			continue
		}
		out.Booked[i].MemoryMiB += b.MemoryMiB
		out.Booked[i].Compute += b.Compute
	}
}

// Overbooked is a booking of a GPU whose bookings add up to more than
// it has: a ResourceClaim's, or a pod's allocation record.
type Overbooked struct {
	// Claim is the claim's "namespace/name", "" for a record.
	Claim string
	// Node is the node of its GPUs.
	Node string
	// Namespace, Pod and PodUID name the record's pod, or the one pod the
	// claim is reserved for (Pod "" when none or several).
	Namespace, Pod string
	PodUID         types.UID
	// GPUs are the over-committed GPUs it books, by index.
	GPUs []int
	// Containers, for a record, are the pod's containers it gives one of
	// GPUs: the node refuses those, and may start the others.
	Containers []string
}

// OverCommitted returns the claims and gpushare's own records (not
// another system's) that book a GPU over-committed in the cache: the
// node refuses to prepare a claim that came after the others
// (docs/dra.md, "A claim the node refuses") and to start the containers
// of a record that came after a claim was prepared, and has given the
// GPU to the one that came first. In no order.
func (c *Cache) OverCommitted() []Overbooked {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []Overbooked
	for _, e := range c.nodes {
		if e.over == nil {
			continue
		}
		for _, np := range e.pods {
			p := np.entry
			if p.invalid || p.placement == nil || p.claim == nil && (p.pod == nil || p.foreign) {
				continue
			}
			var gpus []int
			for _, b := range p.placement.Booked {
				if b.GPU >= 0 && b.GPU < len(e.past) && e.past[b.GPU] {
					gpus = append(gpus, b.GPU)
				}
			}
			if len(gpus) == 0 {
				continue
			}
			o := Overbooked{Node: e.name, GPUs: gpus}
			if p.claim == nil {
				o.Namespace, o.Pod, o.PodUID = p.pod.Namespace, p.pod.Name, p.pod.UID
				for _, c := range p.placement.Containers {
					if slices.ContainsFunc(c.GPUs, func(a alloc.Assignment) bool { return slices.Contains(gpus, a.GPU) }) {
						o.Containers = append(o.Containers, c.Name)
					}
				}
			} else {
				o.Claim = strings.TrimPrefix(p.key, "ResourceClaim ")
				o.Namespace, _, _ = strings.Cut(o.Claim, "/")
				if p.owner != "" {
					o.Pod, o.PodUID = p.ownerName, p.owner
				}
			}
			out = append(out, o)
		}
	}
	return out
}
