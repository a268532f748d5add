package alloc

import (
	"encoding/binary"
	"slices"
	"sync/atomic"
	"unique"
)

// memo caches what is derived from a node's booked state (free shares,
// and a policy's own data), so that rating a node that has not changed
// since the last decision costs no recomputation: most nodes, most of the
// time. An entry holds the exact inputs it was derived from (the node and
// each GPU's usage) and is used only while they still match, whoever
// changed the state, so a stale entry is never read. That rests on a Node
// never changing in place (a new inventory or GPU health is a new Node).
// Entries are immutable once stored and the pointer is atomic: concurrent
// raters of one state are safe.
type memo struct{ p atomic.Pointer[memoEntry] }

type memoEntry struct {
	node  *Node
	usage []Usage
	// share is FreeShare per GPU; used is Σ(1000 - share) over the
	// healthy GPUs, of which there are healthyN.
	share []int64
	used  int64
	bounds
	// minCompute is the smallest compute capacity of a healthy GPU,
	// capMemory and capCompute the largest memory and compute;
	// gapMemory (gapCompute) is the most a healthy GPU's free memory
	// fraction exceeds its free compute fraction (or the reverse), in
	// per-mille. See maxGrowth and minGrowth.
	minCompute, capMemory, capCompute int64
	gapMemory, gapCompute             int64
	// nameHash is a fixed hash of the node's name, an order of nodes
	// that does not follow their names; nodeKey is its half of TieBreak.
	nameHash, nodeKey uint64
	// shape encodes what a shape-only policy may read of the node and its
	// GPUs' usage (see shapeOf), held once for all nodes of the shape
	// (their idle nodes share one) and compared by handle; shapeHash is
	// its hash.
	shape     unique.Handle[string]
	shapeHash uint64
	// owner and value are one policy's own derived data, or nil.
	owner, value any
}

// matches reports whether e was derived from s as it is now.
func (e *memoEntry) matches(s *NodeState) bool {
	return e != nil && e.node == s.Node && slices.Equal(e.usage, s.GPUs)
}

// loadMemo returns s's entry if it matches s as it is now, else nil.
func (s *NodeState) loadMemo() *memoEntry {
	if s.memo == nil {
		return nil
	}
	if e := s.memo.p.Load(); e.matches(s) {
		return e
	}
	return nil
}

// summary returns the matching entry of s, deriving and storing a new one
// if there is none (working copies have no memo: nothing is stored).
func (s *NodeState) summary() *memoEntry {
	if e := s.loadMemo(); e != nil {
		return e
	}
	e := &memoEntry{node: s.Node, usage: slices.Clone(s.GPUs), share: make([]int64, len(s.GPUs)),
		nameHash: mix(0, "", s.Node.Name, -3), nodeKey: nodeKey(s.Node.Name)}
	for i := range s.GPUs {
		e.share[i] = s.FreeShare(i)
		if s.Node.GPUs[i].Healthy {
			e.used += 1000 - e.share[i]
			e.healthyN++
			free := s.Free(i)
			e.maxMemory, e.maxCompute = max(e.maxMemory, free.MemoryMiB), max(e.maxCompute, free.Compute)
			g := &s.Node.GPUs[i]
			if e.healthyN == 1 {
				e.minMemory, e.minCompute = g.MemoryMiB, g.ComputeCapacity()
			}
			e.minMemory, e.minCompute = min(e.minMemory, g.MemoryMiB), min(e.minCompute, g.ComputeCapacity())
			e.capMemory, e.capCompute = max(e.capMemory, g.MemoryMiB), max(e.capCompute, g.ComputeCapacity())
			m, c := free.MemoryMiB*1000/g.MemoryMiB, free.Compute*1000/g.ComputeCapacity()
			e.gapMemory, e.gapCompute = max(e.gapMemory, m-c), max(e.gapCompute, c-m)
			if s.GPUs[i] == (Usage{}) {
				e.idleN++
			}
		}
	}
	if s.memo != nil {
		// Only stored entries are looked up by shape (pickRange).
		shape := shapeOf(s.Node, s.GPUs)
		e.shape = unique.Make(shape)
		e.shapeHash = mix(0, shape, "", -4)
		s.memo.p.Store(e)
	}
	return e
}

// derived returns the memo entry that matches s, if one is at hand: the
// origin of a pristine working copy, or the stored entry of a real state.
func (s *NodeState) derived() *memoEntry {
	if s.pristine {
		return s.origin
	}
	return s.loadMemo()
}

// originOf returns the entry of before, the state after was copied from
// (evaluate's ScoreNode arguments), validating it only when after is not
// a working copy.
func originOf(before, after *NodeState) *memoEntry {
	if after.origin != nil && after.Node == before.Node {
		return after.origin
	}
	return before.summary()
}

// bounds are what mayFit reads of a node's GPUs: healthyN counts the
// healthy GPUs and idleN those of them with nothing booked; maxMemory and
// maxCompute are the most free memory and compute on any healthy GPU (not
// necessarily the same one), minMemory the smallest memory capacity of a
// healthy GPU.
type bounds struct {
	healthyN, maxMemory, maxCompute, minMemory int64
	idleN                                      int
}

// mayFit is a quick necessary condition for pod to fit the state b was
// derived from: each container alone finds enough GPUs. It returns the
// index of a container that cannot fit, or -1 if all may.
func (b *bounds) mayFit(ds []demand) int {
	for i := range ds {
		d := &ds[i]
		switch {
		case d.Exclusive:
			if b.idleN < d.count {
				return i
			}
		case int(b.healthyN) < d.count || d.MemoryMiB > b.maxMemory || d.Compute > b.maxCompute:
			return i
		case d.MemoryPercent > 0 && PercentOf(b.minMemory, d.MemoryPercent) > b.maxMemory:
			// Every GPU of the node needs at least this much.
			return i
		}
	}
	return -1
}

// demand is a container's per-GPU demand with its GPU count, as mayFit
// and the growth bounds read it.
type demand struct {
	Demand
	count int
	init  bool
}

// demandsOf returns the demands of pod's containers in buf.
func demandsOf(pod *PodRequest, buf []demand) []demand {
	buf = buf[:0]
	for i := range pod.Containers {
		c := &pod.Containers[i]
		buf = append(buf, demand{Demand: c.PerGPU(), count: c.GPUCount(), init: c.Kind == Init})
	}
	return buf
}

// maxGrowth bounds how much pod's placement can add to used, the booked
// share of e's healthy GPUs (in per-mille of a GPU), wherever it lands:
// a GPU's FreeShare falls by at most its demand's larger fraction,
// rounded up, and by 1000 at most. Every container counts, init
// containers too (a phase books no more than all of them together).
func (e *memoEntry) maxGrowth(ds []demand) int64 {
	if e.healthyN == 0 {
		return 0
	}
	var grow int64
	for i := range ds {
		d := &ds[i]
		per := int64(1000)
		if !d.Exclusive {
			per = min(per, max(ceilDiv(d.MemoryMiB*1000, e.minMemory), ceilDiv(d.Compute*1000, e.minCompute), d.MemoryPercent*10+1))
		}
		grow += per * int64(d.count)
	}
	return grow
}

// minGrowth bounds from below how much pod's placement adds to used.
// On GPU g a shared demand d lowers the free memory fraction by at least
// fm = ⌊d.mem·1000/mem⌋ and the compute fraction by fc, so FreeShare, the
// smaller of the two, falls by at least max(fm - gapMemory, fc -
// gapCompute), and by exactly 1000 for a whole GPU. Each of a
// container's GPUs falls so; containers may share GPUs, so only the
// largest container's fall is certain. Init containers are left out (the
// app phase is always booked).
func (e *memoEntry) minGrowth(ds []demand) int64 {
	if e.healthyN == 0 {
		return 0
	}
	var grow int64
	for i := range ds {
		d := &ds[i]
		if d.init {
			continue
		}
		per := int64(1000)
		if !d.Exclusive {
			per = max(0, d.MemoryMiB*1000/e.capMemory-e.gapMemory, d.Compute*1000/e.capCompute-e.gapCompute,
				d.MemoryPercent*10-ceilDiv(1000, e.minMemory)-e.gapMemory)
		}
		grow = max(grow, per*int64(d.count))
	}
	return grow
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// storePolicyMemo attaches owner's value, derived from s as it is now, to
// s's entry. The value must not change afterwards.
func (s *NodeState) storePolicyMemo(owner, value any) {
	if s.memo == nil {
		return
	}
	e := *s.summary()
	e.owner, e.value = owner, value
	s.memo.p.Store(&e)
}

// freeShares returns FreeShare for every GPU of s in buf: copied from the
// memo when it matches, else computed.
func (s *NodeState) freeShares(buf []int64) []int64 {
	if e := s.derived(); e != nil {
		return append(buf[:0], e.share...)
	}
	buf = slices.Grow(buf[:0], len(s.GPUs))[:len(s.GPUs)]
	for i := range s.GPUs {
		buf[i] = s.FreeShare(i)
	}
	return buf
}

// shapeOf encodes all of node n and its GPUs' usage but what names them
// (the node's name, the GPUs' UUIDs): two nodes of one shape fit a pod
// alike and a shape-only policy rates them alike. Every field of Node and
// GPU is either here or one of those names (TestShapeCoversNode).
func shapeOf(n *Node, usage []Usage) string {
	b := make([]byte, 0, 16+len(n.GPUs)*(32+len(n.GPUs)))
	b = binary.AppendVarint(b, n.CPUMilli)
	b = binary.AppendVarint(b, n.MemoryMiB)
	b = binary.AppendVarint(b, int64(n.Mode))
	b = binary.AppendUvarint(b, uint64(len(n.GPUs)))
	for i := range n.GPUs {
		g := &n.GPUs[i]
		b = binary.AppendVarint(b, int64(g.Index))
		b = binary.AppendUvarint(b, uint64(len(g.Model)))
		b = append(b, g.Model...)
		b = binary.AppendVarint(b, g.MemoryMiB)
		b = binary.AppendVarint(b, g.Compute)
		b = binary.AppendVarint(b, int64(g.NUMANode))
		var flags byte
		if g.Healthy {
			flags |= 1
		}
		if g.MPS {
			flags |= 2
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(len(g.Peers)))
		for _, p := range g.Peers {
			b = binary.AppendVarint(b, int64(p))
		}
		b = binary.AppendVarint(b, usage[i].MemoryMiB)
		b = binary.AppendVarint(b, usage[i].Compute)
	}
	return string(b)
}
