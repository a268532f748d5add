package alloc

import (
	"errors"
	"slices"
	"sync"
)

// Shape is one kind of pod in the expected workload, with its weight (a
// count or frequency; only ratios matter).
type Shape struct {
	CPUMilli  int64
	MemoryMiB int64
	// Count is the number of GPUs; 0 for a pod without GPUs.
	Count  int
	Demand Demand
	Weight int64
}

// fgdMode selects the tie-break of the fragmentation-aware policy.
type fgdMode int

const (
	// fgdPlain is Fragmentation Gradient Descent as published, with exact
	// integer scores instead of a 0-100 sigmoid; ties fall to Pick.
	fgdPlain fgdMode = iota
	// fgdPack breaks equal fragmentation growth by packing: the node with
	// more of its GPU share booked after placement wins.
	fgdPack
)

// fgd is Fragmentation Gradient Descent (Weng et al., ATC'23). A node's
// fragmentation for shape q is the free GPU share q could not use there:
//
//	all free share        if q needs no GPU, or the node lacks q's CPU or
//	                      memory, or fewer than q.Count GPUs fit q's demand;
//	Σ free share of GPUs  otherwise, over the GPUs that do not fit q.
//	  that don't fit q
//
// The node's fragmentation is Σ_q weight(q) * frag(q), in per-mille GPU
// units times weight. The policy picks the placement that grows it least:
// Primary = frag(before) - frag(after). GPU choice uses the same difference
// per candidate GPU, computed in O(shapes) per GPU from per-shape counts.
type fgd struct {
	shapes []Shape
	mode   fgdMode
	pool   *sync.Pool // of *fragBase, reused across calls
}

func newFGD(o Options, mode fgdMode) (*fgd, error) {
	if len(o.Workload) == 0 {
		return nil, errors.New("the fragmentation-aware policy needs a workload of pod shapes")
	}
	for _, q := range o.Workload {
		if q.Weight < 0 || q.Count < 0 {
			return nil, errors.New("workload shapes need non-negative weight and count")
		}
	}
	return &fgd{shapes: o.Workload, mode: mode, pool: &sync.Pool{New: func() any { return new(fragBase) }}}, nil
}

// fragBase is what the per-GPU update needs about a node.
type fragBase struct {
	share []int64 // free share per GPU
	total int64
	fit   []int   // per shape: GPUs that fit its demand
	below []int64 // per shape: free share on GPUs that don't
}

// get returns a fragBase for s from the pool; put it back with put.
func (f *fgd) get(s *NodeState) *fragBase {
	var b *fragBase
	if f.pool != nil {
		b, _ = f.pool.Get().(*fragBase)
	}
	if b == nil {
		b = new(fragBase)
	}
	f.fill(b, s)
	return b
}

func (f *fgd) put(b *fragBase) {
	if f.pool != nil {
		f.pool.Put(b)
	}
}

func (f *fgd) fill(b *fragBase, s *NodeState) {
	b.share = slices.Grow(b.share[:0], len(s.GPUs))[:len(s.GPUs)]
	b.fit = slices.Grow(b.fit[:0], len(f.shapes))[:len(f.shapes)]
	b.below = slices.Grow(b.below[:0], len(f.shapes))[:len(f.shapes)]
	clear(b.fit)
	clear(b.below)
	b.total = 0
	for i := range s.GPUs {
		b.share[i] = s.FreeShare(i)
		b.total += b.share[i]
	}
	for q := range f.shapes {
		if f.shapes[q].Count == 0 {
			continue
		}
		d := &f.shapes[q].Demand
		for i := range s.GPUs {
			if fits(s, i, d) {
				b.fit[q]++
			} else {
				b.below[q] += b.share[i]
			}
		}
	}
}

// frag sums the weighted fragmentation given the node's free CPU and memory.
func (f *fgd) frag(b *fragBase, cpu, mem int64) int64 {
	var sum int64
	for q := range f.shapes {
		sh := &f.shapes[q]
		if sh.Count > 0 && cpu >= sh.CPUMilli && mem >= sh.MemoryMiB && b.fit[q] >= sh.Count {
			sum += sh.Weight * b.below[q]
		} else {
			sum += sh.Weight * b.total
		}
	}
	return sum
}

func (f *fgd) ScoreNode(before, after *NodeState, _ *PodRequest) Score {
	b0, b1 := f.get(before), f.get(after)
	growth := f.frag(b1, after.FreeCPU(), after.FreeMemory()) - f.frag(b0, before.FreeCPU(), before.FreeMemory())
	f.put(b0)
	f.put(b1)
	sc := Score{Primary: -growth}
	if f.mode == fgdPack {
		sc.Secondary = usedSharePPM(after)
	}
	return sc
}

func (f *fgd) ScoreGPUs(s *NodeState, pod *PodRequest, d Demand, candidates []int, scores []int64) {
	b := f.get(s)
	defer f.put(b)
	cpu, mem := s.FreeCPU()-pod.CPUMilli, s.FreeMemory()-pod.MemoryMiB
	for k, i := range candidates {
		g := &s.Node.GPUs[i]
		old := s.GPUs[i]
		u := old.add(Usage{MemoryMiB: d.MemoryMiB, Compute: d.Compute})
		if d.Exclusive {
			u = Usage{MemoryMiB: g.MemoryMiB, Compute: g.ComputeCapacity()}
		}
		share := shareOf(g, u)
		total := b.total - b.share[i] + share
		var sum int64
		for q := range f.shapes {
			sh := &f.shapes[q]
			if sh.Count == 0 || cpu < sh.CPUMilli || mem < sh.MemoryMiB {
				sum += sh.Weight * total
				continue
			}
			fitOld, fitNew := fitsUsage(g, old, &sh.Demand), fitsUsage(g, u, &sh.Demand)
			n, below := b.fit[q], b.below[q]
			if fitOld {
				n--
			} else {
				below -= b.share[i]
			}
			if fitNew {
				n++
			} else {
				below += share
			}
			if n >= sh.Count {
				sum += sh.Weight * below
			} else {
				sum += sh.Weight * total
			}
		}
		scores[k] = -sum
	}
}

// Fragmentation returns the node's fragmentation for a workload: the
// weighted sum over shapes of the free GPU share (per-mille) each shape
// could not use. Divide by the total weight for the expected unusable share.
func Fragmentation(s *NodeState, workload []Shape) int64 {
	f := fgd{shapes: workload}
	var b fragBase
	f.fill(&b, s)
	return f.frag(&b, s.FreeCPU(), s.FreeMemory())
}
