package alloc

import "unique"

// Summary is what a Rater reads of a node's state to rate a pod there by
// the node's shape: the state's memo entry in brief, held by the state's
// owner beside its pointer to the state (the cache's node entry), so that
// rating a node that has not changed since the last call reads one place
// in memory rather than the state, its Node, its memo entry and both
// copies of its GPUs' usage (docs/benchmarks.md, "Scheduler throughput").
//
// Unlike the memo entry, a Summary is not checked against the state when
// it is read: it is right only while the state is as it was when
// Summarize made it, and its owner must make it again after every change
// to the state, the Node and the live samples included. What a wrong one
// costs is a wrong rating, not a wrong booking: Placer.Place reads the
// state itself.
type Summary struct {
	bounds
	// cpu and mem are the state's booked CPU and memory, freeCPU and
	// freeMem what is left of the node's.
	cpu, mem, freeCPU, freeMem int64
	shape                      unique.Handle[string]
	shapeHash                  uint64
	nameHash, nodeKey          uint64
	// quick is set when a Rater may rate by shape at all: the state has a
	// memo and no live samples. wholeCard is the node's mode.
	quick, wholeCard bool
}

// Summarize returns s's Summary as s is now.
func (s *NodeState) Summarize() Summary {
	if s.memo == nil || s.Live != nil {
		return Summary{}
	}
	e := s.summary()
	return Summary{bounds: e.bounds, cpu: s.CPUMilli, mem: s.MemoryMiB, freeCPU: s.FreeCPU(), freeMem: s.FreeMemory(),
		shape: e.shape, shapeHash: e.shapeHash, nameHash: e.nameHash, nodeKey: e.nodeKey,
		quick: true, wholeCard: s.Node.Mode == WholeCard}
}

// quickFit is quickFit of the state sum was made from.
func (sum *Summary) quickFit(pod *PodRequest) bool {
	return pod.CPUMilli <= sum.freeCPU && pod.MemoryMiB <= sum.freeMem && (!sum.wholeCard || allExclusive(pod))
}

// key is shapeKey of the state sum was made from.
func (sum *Summary) key() uint64 { return shapeKeyOf(sum.shapeHash, sum.cpu, sum.mem) }
