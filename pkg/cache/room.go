package cache

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// Room is alloc.Spare.Add over every node's bookings, the turnover of the
// GPU demand the cache placed and released, and the GPU demand waiting,
// in GPUs: the pods that found no room (Wait) and are neither placed nor
// gone, and those that gave up waiting, in the churn window. With it the
// cache is a workload.RoomSource.
func (c *Cache) Room(sp *alloc.Spare) (alloc.Room, float64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out alloc.Room
	for _, e := range c.nodes {
		if e.state != nil {
			sp.Add(&out, e.state)
		}
	}
	out.Turnover = c.churn.Turnover()
	return out, float64(c.waitingShareLocked())/1000 + c.churn.Away()
}

// Wait notes that a pod asking for req found no room: its GPU demand
// counts as waiting until the pod is placed (Assume, or bound with a
// record) or gone (RemovePod), when it counts as turned away. A pod
// noted again counts once, with its latest request.
func (c *Cache) Wait(uid types.UID, req *alloc.PodRequest) {
	if req == nil || !req.GPUs() || uid == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting[uid] = req
	c.nWaiting.Store(int64(len(c.waiting)))
}

// Waiting is the GPU demand of the pods that found no room and are
// neither placed nor gone, in thousandths of a GPU.
func (c *Cache) Waiting() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.waitingShareLocked()
}

// waitingShareLocked weighs requests by memory against the mean healthy
// GPU, as alloc.SpareOf weighs the mix.
func (c *Cache) waitingShareLocked() int64 {
	if len(c.waiting) == 0 {
		return 0
	}
	mean := c.meanGPULocked()
	var milli int64
	for _, req := range c.waiting {
		milli += req.Share(mean)
	}
	return milli
}

// meanGPULocked is the memory of the nodes' mean healthy GPU, in MiB.
func (c *Cache) meanGPULocked() int64 {
	var gpus, mib int64
	for kind, n := range c.supply {
		gpus += n
		mib += n * kind.MemoryMiB
	}
	return mib / max(gpus, 1)
}

// placedLocked counts what a pod with no entry before books on e's node
// as placed, and ends its wait.
func (c *Cache) placedLocked(uid types.UID, e *nodeEntry, p *alloc.Placement) {
	if p != nil && e.state != nil {
		c.churn.Place(p.Share(e.state.Node))
	}
	c.stopWaitingLocked(uid)
}

// releasedLocked counts what entry p booked as released.
func (c *Cache) releasedLocked(p *podEntry) {
	if p.invalid || p.placement == nil {
		return
	}
	if e := c.nodes[p.node]; e != nil && e.state != nil {
		c.churn.Release(p.placement.Share(e.state.Node))
	}
}

// goneLocked ends the wait of a pod that is gone, as turned away.
func (c *Cache) goneLocked(uid types.UID) {
	if req, ok := c.waiting[uid]; ok {
		c.churn.TurnAway(req.Share(c.meanGPULocked()))
		c.stopWaitingLocked(uid)
	}
}

// stopWaitingLocked ends uid's wait, if it waited.
func (c *Cache) stopWaitingLocked(uid types.UID) {
	if _, ok := c.waiting[uid]; ok {
		delete(c.waiting, uid)
		c.nWaiting.Store(int64(len(c.waiting)))
	}
}

// boundWhileWaiting ends the wait of a pod bound without a record of
// gpushare's (by another scheduler, or spec.nodeName): it waits no more.
func (c *Cache) boundWhileWaiting(uid types.UID) {
	if c.nWaiting.Load() == 0 {
		return
	}
	// Most bound pods' updates are of pods that never waited.
	c.mu.RLock()
	_, waited := c.waiting[uid]
	c.mu.RUnlock()
	if !waited {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopWaitingLocked(uid)
}
