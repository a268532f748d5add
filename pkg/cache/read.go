package cache

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// Read calls fn with the node's state under the read lock, or returns why
// the node takes no part. fn must not keep or change the state.
func (c *Cache) Read(node string, fn func(*alloc.NodeState)) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.readLocked(node, c.nodes[node], func(s *alloc.NodeState, _ *alloc.Summary) { fn(s) })
}

// ReadNode is Read of the node n names, found by the object itself
// while n is the object the cache last saw: Filter reads hundreds of
// nodes per pod, and finding each by its pointer costs less than hashing
// and comparing its name (docs/benchmarks.md, "Scheduler throughput").
// An older or other object of the node is found by name. fn gets the
// state's Summary too, to rate by (alloc.Rater.RateSummary).
func (c *Cache) ReadNode(n *corev1.Node, fn func(*alloc.NodeState, *alloc.Summary)) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.objects[n]
	if e == nil {
		e = c.nodes[n.Name]
	}
	return c.readLocked(n.Name, e, fn)
}

func (c *Cache) readLocked(node string, e *nodeEntry, fn func(*alloc.NodeState, *alloc.Summary)) error {
	if e == nil {
		return c.nodeErrorLocked(node)
	}
	if err := c.daemons.down(node, c.now); err != nil {
		return err
	}
	fn(e.state, e.verified())
	return nil
}

// is reports whether the entry's node is named name.
func (e *nodeEntry) is(name string) bool {
	if e.shortLen > 0 {
		return int(e.shortLen) == len(name) && string(e.short[:e.shortLen]) == name
	}
	return e.name == name
}

// ReadEach calls fn with the state of each named node and its Summary, or
// why the node is not in the cache, under one read lock: rating many nodes
// for one request takes the lock once. fn must not keep or change either,
// nor call the Cache.
func (c *Cache) ReadEach(names []string, fn func(name string, s *alloc.NodeState, sum *alloc.Summary, err error)) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	d := c.daemons
	// The clock is read only when some node has a lease: Filter reads
	// every node it tries.
	leases := d.any()
	var now time.Time
	if leases {
		now = c.now()
	}
	clock := func() time.Time { return now }
	// Each name is first tried against the entry that followed the
	// previous one last time, from the last entry of the latest call on:
	// kube-scheduler names nodes in the order of its own list, going
	// round it a window at a time, so most names are found without
	// hashing them and probing the map, whose keys lie scattered
	// (docs/benchmarks.md, "Scheduler throughput").
	prev := c.lastRead.Load()
	for _, name := range names {
		var e *nodeEntry
		if prev != nil {
			if next := prev.after.Load(); next != nil && !next.gone && next.is(name) {
				e = next
			}
		}
		if e == nil {
			e = c.nodes[name]
			if e == nil {
				fn(name, nil, nil, c.nodeErrorLocked(name))
				continue
			}
			if prev != nil {
				prev.after.Store(e)
			}
		}
		prev = e
		if leases {
			if err := d.down(name, clock); err != nil {
				fn(name, nil, nil, err)
				continue
			}
		}
		fn(name, e.state, e.verified(), nil)
	}
	if prev != nil {
		c.lastRead.Store(prev)
	}
}

// NodeError says why a node is not in the cache, nil if it is.
func (c *Cache) NodeError(node string) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.nodes[node] != nil {
		return nil
	}
	return c.nodeErrorLocked(node)
}

func (c *Cache) nodeErrorLocked(node string) error {
	if err := c.rejected[node]; err != nil {
		return err
	}
	return fmt.Errorf("%w: %s", ErrNodeGone, node)
}

// Snapshot returns copies of every node's state, sorted by name.
func (c *Cache) Snapshot() []*alloc.NodeState {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.snapshotLocked()
}

// gpuSample is what the metrics show of one GPU.
type gpuSample struct {
	node, model string
	index       int
	capacityMiB int64
	// booked includes what conflicting bookings hold: a GPU that records
	// over-commit shows more booked than it has.
	booked     alloc.Usage
	claimedMiB int64
}

// samples returns what the metrics show of every GPU, each node's GPUs
// together and in order, how many records the cache refuses, and how
// many booked pods' requests were edited after binding, and how many
// booked records do not conform to their pods' requests.
func (c *Cache) samples() (gpus []gpuSample, refused, edited, unconforming int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	claimed := map[string][]int64{}
	for _, p := range c.pods {
		if len(p.edited) > 0 {
			edited++
		}
		if p.unconforming != nil && !p.invalid && c.nodes[p.node] != nil {
			unconforming++
		}
		if p.claim == nil || p.invalid || p.placement == nil {
			continue
		}
		e := c.nodes[p.node]
		if e == nil {
			continue
		}
		per := claimed[p.node]
		if per == nil {
			per = make([]int64, len(e.state.Node.GPUs))
			claimed[p.node] = per
		}
		for _, b := range p.placement.Booked {
			if b.GPU >= 0 && b.GPU < len(per) {
				per[b.GPU] += b.MemoryMiB
			}
		}
	}
	n := 0
	for _, e := range c.nodes {
		n += len(e.state.Node.GPUs)
	}
	gpus = make([]gpuSample, 0, n)
	for name, e := range c.nodes {
		per := claimed[name]
		for i, g := range e.state.Node.GPUs {
			s := gpuSample{node: name, model: g.Model, index: i, capacityMiB: g.MemoryMiB, booked: e.state.GPUs[i]}
			if i < len(e.over) {
				s.booked.MemoryMiB += e.over[i].MemoryMiB
				s.booked.Compute += e.over[i].Compute
			}
			if i < len(per) {
				s.claimedMiB = per[i]
			}
			gpus = append(gpus, s)
		}
	}
	return gpus, len(c.refused), edited, unconforming
}

func (c *Cache) snapshotLocked() []*alloc.NodeState {
	out := make([]*alloc.NodeState, 0, len(c.nodes))
	for _, e := range c.nodes {
		out = append(out, e.copyState(false))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node.Name < out[j].Node.Name })
	return out
}

// copyState returns a copy of e's state; withConflicts adds to each GPU's
// usage what conflicting bookings hold.
func (e *nodeEntry) copyState(withConflicts bool) *alloc.NodeState {
	e.verified()
	s := e.state.Clone()
	s.Node = copyNode(s.Node)
	if withConflicts {
		for i, o := range e.over {
			s.GPUs[i].MemoryMiB += o.MemoryMiB
			s.GPUs[i].Compute += o.Compute
		}
	}
	return s
}

// ReadBooked calls fn with a copy of node's state whose GPU usage includes
// what conflicting bookings hold, as the metrics show it: a GPU that
// records over-commit shows more booked than it has.
func (c *Cache) ReadBooked(node string, fn func(*alloc.NodeState)) error {
	// Read holds the read lock while fn runs, so c.nodes[node] is e.
	return c.Read(node, func(*alloc.NodeState) { fn(c.nodes[node].copyState(true)) })
}

// Holding returns the placement the cache books for a pod, and whether it
// is only assumed; nil if the pod holds nothing.
func (c *Cache) Holding(uid types.UID) (p *alloc.Placement, assumed bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e := c.pods[uid]; e != nil && !e.invalid {
		return e.placement, e.assumed
	}
	return nil, false
}
