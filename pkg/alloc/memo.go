package alloc

import (
	"slices"
	"sync/atomic"
)

// memo caches what is derived from a node's booked state (free shares,
// and a policy's own data), so that rating a node that has not changed
// since the last decision costs no recomputation: most nodes, most of the
// time. An entry holds the exact inputs it was derived from (the node,
// each GPU's usage and health) and is used only while they still match,
// whoever changed the state, so a stale entry is never read. That rests
// on a Node never changing in place except for its GPUs' Healthy flags
// (a new inventory is a new Node). Entries are immutable once stored and
// the pointer is atomic: concurrent raters of one state are safe.
type memo struct{ p atomic.Pointer[memoEntry] }

type memoEntry struct {
	node    *Node
	usage   []Usage
	healthy []bool
	// share is FreeShare per GPU; used is Σ(1000 - share) over the
	// healthy GPUs, of which there are healthyN.
	share          []int64
	used, healthyN int64
	// nameHash is a fixed hash of the node's name, an order of nodes
	// that does not follow their names; nodeKey is its half of TieBreak.
	nameHash, nodeKey uint64
	// owner and value are one policy's own derived data, or nil.
	owner, value any
}

// matches reports whether e was derived from s as it is now.
func (e *memoEntry) matches(s *NodeState) bool {
	if e == nil || e.node != s.Node || !slices.Equal(e.usage, s.GPUs) {
		return false
	}
	for i := range e.healthy {
		if e.healthy[i] != s.Node.GPUs[i].Healthy {
			return false
		}
	}
	return true
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
	e := &memoEntry{node: s.Node, usage: slices.Clone(s.GPUs), healthy: make([]bool, len(s.GPUs)), share: make([]int64, len(s.GPUs)),
		nameHash: mix(0, "", s.Node.Name, -3), nodeKey: nodeKey(s.Node.Name)}
	for i := range s.GPUs {
		e.healthy[i] = s.Node.GPUs[i].Healthy
		e.share[i] = s.FreeShare(i)
		if e.healthy[i] {
			e.used += 1000 - e.share[i]
			e.healthyN++
		}
	}
	if s.memo != nil {
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
