package cache

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/record"
)

// book applies entry p to e. A record is first placed on e's GPUs
// (record.Booking.On); one that cannot be is kept invalid and books
// nothing. One that does not conform to the pod's request books what it
// names all the same, and is reported. A booking that no longer fits
// (the node's GPUs changed under running pods, or records over-commit a
// GPU) is kept as a conflict: its GPUs are marked unhealthy in the
// cache's copy so nothing more lands on them, and what it holds is shown
// in e.over.
func (c *Cache) book(e *nodeEntry, p *podEntry) {
	defer e.resum()
	p.invalid, p.conflict = false, false
	if p.claim != nil {
		placement, err := claim.Placement(p.key, p.claim, e.inventory)
		if err != nil {
			p.invalid = true
			c.logger.Error(err, "Ignoring the claim's allocation", "claim", p.key)
			return
		}
		p.placement = placement
	}
	if p.record != "" {
		placed, err := p.booking().On(e.inventory, e.state.Node)
		if err != nil {
			p.invalid = true
			c.report(p.pod, p.key, p.record, err)
			return
		}
		p.placement = placed.Placement
		p.unconforming = placed.Unconforming
		p.pinned = p.foreign
		c.noteUnconforming(p)
		if p.pod != nil && !p.foreign {
			delete(c.refused, p.pod.UID)
		}
	}
	// What is bound is booked whatever the node's CPU and memory: only
	// its GPUs can conflict.
	err := e.state.Book(p.placement)
	if err == nil && p.foreign && p.pod != nil {
		delete(c.refused, p.pod.UID)
	}
	if err != nil {
		p.conflict = true
		c.logger.Error(err, "Pod's GPU booking does not fit its node; holding its GPUs", "pod", p.key, "node", e.state.Node.Name)
		if p.record != "" && !p.overNoted && p.pod != nil && c.opts.Refused != nil {
			// A record that no scheduler could have written beside the
			// others (gpushare placed nothing for another system's):
			// name the pod, once. It is held, not refused.
			p.overNoted = true
			if p.foreign {
				err = fmt.Errorf("%w over-commits its GPU: %w", record.Foreign(p.pod), err)
			}
			c.opts.Refused(p.pod, fmt.Errorf("%w: %w", record.ErrOverCommitted, err))
		}
		// A new Node, not a change in place: the core's memo relies on it.
		n := copyNode(e.state.Node)
		if e.over == nil {
			e.over = make([]alloc.Usage, len(n.GPUs))
			e.past = make([]bool, len(n.GPUs))
		}
		for _, b := range p.placement.Booked {
			if b.GPU >= 0 && b.GPU < len(n.GPUs) {
				// What the GPU books with this and the conflicts before.
				u, was := e.state.GPUs[b.GPU], e.over[b.GPU]
				if !n.GPUs[b.GPU].Holds(alloc.Usage{MemoryMiB: u.MemoryMiB + was.MemoryMiB + b.MemoryMiB, Compute: u.Compute + was.Compute + b.Compute}) {
					e.past[b.GPU] = true
				}
				n.GPUs[b.GPU].Healthy = false
				o := &e.over[b.GPU]
				o.MemoryMiB += b.MemoryMiB
				o.Compute += b.Compute
			}
		}
		e.state.Node = n
	}
}

// booking is p's record as record.Reader read it, before it is placed on
// its node.
func (p *podEntry) booking() *record.Booking {
	b := &record.Booking{Value: p.record, Placement: p.placement, Request: p.req, Allocation: p.alloc, Unconforming: p.unconforming, Pinned: p.pinned}
	if p.foreign {
		b.System = record.Foreign(p.pod)
	}
	return b
}

// noteUnconforming reports, once per record, a record that books what it
// names though it is not what its pod asks.
func (c *Cache) noteUnconforming(p *podEntry) {
	if p.unconforming == nil || p.noted {
		return
	}
	p.noted = true
	err := fmt.Errorf("%w while the pod runs, and gpushare-node gives its containers no GPU: %w",
		record.ErrUnconforming, p.unconforming)
	c.logger.Error(err, "Pod's allocation record is not what it asks", "pod", p.key)
	if c.opts.Refused != nil && p.pod != nil {
		c.opts.Refused(p.pod, err)
	}
}

// report logs, once per record value, why a pod's record books nothing,
// and tells Options.Refused.
func (c *Cache) report(pod *corev1.Pod, key, record string, err error) {
	if pod != nil {
		if r, ok := c.refused[pod.UID]; ok && r == record {
			return
		}
		c.refused[pod.UID] = record
	}
	c.logger.Error(err, "Ignoring the pod's allocation record", "pod", key)
	if c.opts.Refused != nil && pod != nil {
		c.opts.Refused(pod, err)
	}
}

func (c *Cache) unbook(uid types.UID, p *podEntry) {
	e := c.nodes[p.node]
	if e == nil || e.pods.get(uid) != p {
		return
	}
	e.pods.remove(uid)
	if p.invalid {
		return
	}
	defer e.resum()
	if p.conflict || e.over != nil {
		// Rebuild the node from its inventory: the conflict's GPUs may
		// be usable again (also when p was booked before the booking
		// that conflicts with it).
		c.rebuild(e)
		return
	}
	if err := e.state.Release(p.placement); err != nil {
		c.logger.Error(err, "Releasing a pod's GPUs failed; rebuilding the node", "pod", p.key)
		c.rebuild(e)
		return
	}
	if len(e.state.Node.GPUs) > len(e.inventory.GPUs) {
		// The pod may have been the last to hold a vanished GPU.
		c.rebuild(e)
	}
}

// Ended reports whether a pod no longer holds its GPUs (record.Ended).
func Ended(pod *corev1.Pod) bool { return record.Ended(pod) }

// SetPod adds or updates a pod from the informer. A bound pod with a
// valid allocation record for its node books it (replacing an assumed
// placement); a pod that ended releases its GPUs; a pod without a record
// keeps whatever was assumed for it. A record on a pod that is not bound,
// or that is not what the pod asks for, books nothing and is reported;
// once booked, a record is not changed by edits of the annotation.
func (c *Cache) SetPod(pod *corev1.Pod) { c.setPod(pod, true) }

// AdoptPod is SetPod for a pod of the informer's first list: what its
// record books was placed before this cache began, by this scheduler
// before a restart or by another, and does not count as placed in the
// turnover (Room): a cluster that has just been taken in has placed
// nothing yet, and released nothing.
func (c *Cache) AdoptPod(pod *corev1.Pod) { c.setPod(pod, false) }

// setPod is SetPod, counting a booking new to the cache as placed if
// placed.
func (c *Cache) setPod(pod *corev1.Pod, placed bool) {
	if Ended(pod) {
		c.RemovePod(pod.UID)
		return
	}
	if pod.Spec.NodeName != "" {
		c.boundWhileWaiting(pod.UID)
	}
	if c.opts.Resources != nil && pod.Spec.NodeName != "" {
		// Most updates are of pods counted already (status changes):
		// those take only the read lock.
		c.mu.RLock()
		_, counted := c.bound[pod.UID]
		c.mu.RUnlock()
		if !counted {
			c.mu.Lock()
			c.countLocked(pod)
			c.mu.Unlock()
		}
	}
	// gpushare's record first; else one another system left.
	value, ok := record.Value(pod)
	if !ok {
		c.noteUnrecorded(pod)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.pods[pod.UID]
	if old != nil && !old.assumed && old.record == value {
		// The latest object and its text: the informer holds them,
		// and the cache then holds no older copy of the pod.
		old.pod, old.record = pod, value
		c.noteEdits(pod, old)
		return
	}
	key := pod.Namespace + "/" + pod.Name
	p, err := c.parseRecord(pod)
	if err != nil {
		c.report(pod, key, value, err)
		return
	}
	if old != nil && !old.assumed && !old.invalid {
		if sameRecord(old, p) {
			old.pod, old.record = pod, value
			c.noteEdits(pod, old)
			return
		}
		c.report(pod, key, value, fmt.Errorf("%w; keeping the booking of the record it was bound with", ErrRecordChanged))
		return
	}
	if old != nil {
		c.unbook(pod.UID, old)
	}
	delete(c.refused, pod.UID)
	c.pods[pod.UID] = p
	if e := c.nodes[p.node]; e != nil {
		e.pods.set(pod.UID, p)
		if !p.foreign && needsRebuild(e, p.placement) {
			c.rebuild(e)
		} else {
			c.book(e, p)
		}
		switch {
		case old == nil && !p.invalid && placed:
			// Bound by another replica, or while the informer was
			// away.
			c.placedLocked(pod.UID, e, p.placement)
		case old == nil && !p.invalid:
			c.stopWaitingLocked(pod.UID)
		}
	}
	c.noteEdits(pod, p)
}

// noteEdits reports, once per change, that a booked pod's request-shaping
// annotations are no longer those its record was made for. The record
// keeps booking its GPUs: the pod's containers run with them.
func (c *Cache) noteEdits(pod *corev1.Pod, p *podEntry) {
	if p.asked == nil || c.opts.RequestAnnotations == nil || p.invalid {
		return
	}
	edited := p.asked.Edited(pod.Annotations, c.opts.RequestAnnotations(pod))
	if slices.Equal(edited, p.edited) {
		return
	}
	p.edited, p.pod = edited, pod
	if len(edited) == 0 {
		return
	}
	err := fmt.Errorf("%w: %s; the record keeps booking the GPUs it names, and the node daemon serves its containers no more",
		record.ErrRequestEdited, strings.Join(edited, ", "))
	c.logger.Error(err, "Pod's GPU request was edited after binding", "pod", p.key)
	if c.opts.Refused != nil {
		c.opts.Refused(pod, err)
	}
}

// noteUnrecorded reports, once per pod, a pod bound to a gpushare node
// that asks for GPUs and carries no record: it was bound without
// gpushare (spec.nodeName set by hand, or another scheduler), so it books
// no GPU and the node daemon gives its containers none.
func (c *Cache) noteUnrecorded(pod *corev1.Pod) {
	if pod.Spec.NodeName == "" || c.opts.Requests == nil {
		return
	}
	c.mu.RLock()
	_, seen := c.unrecorded[pod.UID]
	_, gpushare := c.nodes[pod.Spec.NodeName]
	// A pod the scheduler assumed gets its record from it: a binder
	// other than gpushare's may have bound it first.
	_, assumed := c.pods[pod.UID]
	c.mu.RUnlock()
	if seen || !gpushare || assumed {
		return
	}
	req, err := c.opts.Requests(pod)
	asks := err == nil && req.GPUs()
	c.mu.Lock()
	if _, seen := c.unrecorded[pod.UID]; seen {
		c.mu.Unlock()
		return
	}
	c.unrecorded[pod.UID] = asks
	c.mu.Unlock()
	if !asks {
		return
	}
	err = fmt.Errorf("%w: bound to node %s without gpushare's %s record (spec.nodeName set directly, or another scheduler bound it): "+
		"gpushare books no GPU for it and gpushare-node gives its containers none; recreate it without spec.nodeName",
		ErrNoRecord, pod.Spec.NodeName, gpusharev1.AllocationAnnotation)
	c.logger.Error(err, "Pod asks for GPUs and holds none", "pod", klog.KObj(pod))
	if c.opts.Refused != nil {
		c.opts.Refused(pod, err)
	}
}

// Why a record books nothing; check with errors.Is.
var (
	ErrNotBound      = record.ErrNotBound
	ErrRecordChanged = errors.New("allocation record changed after the pod was bound")
	ErrNoRecord      = errors.New("pod asks for GPUs but holds none")
)

// needsRebuild reports whether p, a record's placement, names a GPU
// that e's state does not list: the node is then rebuilt with that GPU,
// vanished.
func needsRebuild(e *nodeEntry, p *alloc.Placement) bool {
	index := uuidIndex(e.state.Node)
	for _, ca := range p.Containers {
		for _, g := range ca.GPUs {
			if _, ok := index[g.UUID]; !ok {
				return true
			}
		}
	}
	return false
}

// sameRecord reports whether the record of p, just parsed, says what
// old's says: the same allocation, though not the same text.
func sameRecord(old, p *podEntry) bool {
	a, b := old.alloc, p.alloc
	var err error
	if !old.foreign {
		if a, err = gpusharev1.ParseAllocation(old.record); err != nil {
			return false
		}
	}
	if !p.foreign {
		if b, err = gpusharev1.ParseAllocation(p.record); err != nil {
			return false
		}
	}
	x, err1 := gpusharev1.Marshal(a)
	y, err2 := gpusharev1.Marshal(b)
	return err1 == nil && err2 == nil && x == y
}

// parseRecord reads pod's record (record.Reader): gpushare's
// allocation, or the annotations another system left, translated. Both
// are held to the same rules.
func (c *Cache) parseRecord(pod *corev1.Pod) (*podEntry, error) {
	b, err := c.reader.Read(pod)
	if err != nil {
		return nil, err
	}
	p := &podEntry{key: pod.Namespace + "/" + pod.Name, node: b.Allocation.Node, placement: b.Placement, record: b.Value,
		asked: b.Allocation.Asked, req: b.Request, pod: pod, unconforming: b.Unconforming}
	if b.System != nil {
		// Placed on the node's GPUs by index at each booking.
		p.alloc, p.foreign = b.Allocation, true
	}
	return p, nil
}

// RemovePod releases whatever a pod held or was assumed to hold, the
// claims reserved for it alone included.
func (c *Cache) RemovePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseClaimsLocked(uid)
	c.uncountLocked(uid)
	delete(c.refused, uid)
	delete(c.unrecorded, uid)
	c.goneLocked(uid)
	if c.joinLocked(uid) {
		return
	}
	if p := c.pods[uid]; p != nil {
		c.releasedLocked(p)
		c.unbook(uid, p)
		delete(c.pods, uid)
	}
}
