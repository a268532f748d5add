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
	// fgdPack rounds the growth to tenths of a GPU and breaks ties by
	// packing (the node with more of its GPU share booked after placement),
	// then by a fixed pseudo-random order of nodes (a hash of the node name,
	// the same for every pod): ties then fill the same nodes first, as first
	// fit does, without following the order of node names.
	fgdPack
)

// fgdQuantum is fgdPack's rounding of fragmentation growth: 100 per-mille,
// a tenth of a GPU per arriving pod.
const fgdQuantum = 100

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
	// demands are the distinct GPU demands of the shapes (whose fit per
	// GPU does not depend on CPU); group[q] indexes shape q's demand.
	demands []Demand
	group   []int
	weight  int64 // total weight of the shapes
	mode    fgdMode
	pool    *sync.Pool // of *fragBase, reused across calls
}

func newFGD(o Options, mode fgdMode) (*fgd, error) {
	if len(o.Workload) == 0 {
		return nil, errors.New("the fragmentation-aware policy needs a workload of pod shapes")
	}
	var total int64
	for _, q := range o.Workload {
		if q.Weight < 0 || q.Count < 0 {
			return nil, errors.New("workload shapes need non-negative weight and count")
		}
		total += q.Weight
	}
	if total == 0 {
		return nil, errors.New("workload shapes have zero total weight")
	}
	f := newFGDShapes(o.Workload)
	f.mode = mode
	f.pool = &sync.Pool{New: func() any { return new(fragBase) }}
	return f, nil
}

func newFGDShapes(shapes []Shape) *fgd {
	f := &fgd{shapes: shapes, group: make([]int, len(shapes))}
	for q := range shapes {
		f.weight += shapes[q].Weight
		f.group[q] = -1
		if shapes[q].Count == 0 {
			continue
		}
		d := shapes[q].Demand
		k := slices.IndexFunc(f.demands, func(e Demand) bool {
			return e.MemoryMiB == d.MemoryMiB && e.Compute == d.Compute && e.Exclusive == d.Exclusive && slices.Equal(e.Models, d.Models)
		})
		if k < 0 {
			k = len(f.demands)
			f.demands = append(f.demands, d)
		}
		f.group[q] = k
	}
	return f
}

// fragBase is what the per-GPU update needs about a node.
type fragBase struct {
	share []int64 // free share per GPU
	total int64
	fit   []int   // per demand: GPUs that fit it
	below []int64 // per demand: free share on GPUs that don't
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
	b.fit = slices.Grow(b.fit[:0], len(f.demands))[:len(f.demands)]
	b.below = slices.Grow(b.below[:0], len(f.demands))[:len(f.demands)]
	clear(b.fit)
	clear(b.below)
	b.total = 0
	for i := range s.GPUs {
		b.share[i] = s.FreeShare(i)
		b.total += b.share[i]
	}
	for k := range f.demands {
		d := &f.demands[k]
		for i := range s.GPUs {
			if fits(s, i, d) {
				b.fit[k]++
			} else {
				b.below[k] += b.share[i]
			}
		}
	}
}

// frag sums the weighted fragmentation given the node's free CPU and memory.
func (f *fgd) frag(b *fragBase, cpu, mem int64) int64 {
	var sum int64
	for q := range f.shapes {
		sh := &f.shapes[q]
		if k := f.group[q]; k >= 0 && cpu >= sh.CPUMilli && mem >= sh.MemoryMiB && b.fit[k] >= sh.Count {
			sum += sh.Weight * b.below[k]
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
	if f.mode == fgdPlain {
		return Score{Primary: -growth}
	}
	// Growth in tenths of a GPU per arriving pod, rounded half away from
	// zero: finer differences are noise that packing should override.
	q := fgdQuantum * f.weight
	rounded := (growth + q/2) / q
	if growth < 0 {
		rounded = (growth - q/2) / q
	}
	return Score{Primary: -rounded,
		Secondary: usedSharePPM(after)<<20 | int64(mix(0, "", after.Node.Name, -3)>>44)}
}

func (f *fgd) ScoreGPUs(s *NodeState, pod *PodRequest, d Demand, candidates []int, scores []int64) {
	b := f.get(s)
	defer f.put(b)
	after := f.pool.Get().(*fragBase)
	defer f.pool.Put(after)
	after.fit = slices.Grow(after.fit[:0], len(f.demands))[:len(f.demands)]
	after.below = slices.Grow(after.below[:0], len(f.demands))[:len(f.demands)]
	cpu, mem := s.FreeCPU()-pod.CPUMilli, s.FreeMemory()-pod.MemoryMiB
	for k, i := range candidates {
		g := &s.Node.GPUs[i]
		old := s.GPUs[i]
		u := old.add(d.usageOn(g))
		share := shareOf(g, u)
		after.total = b.total - b.share[i] + share
		// Only GPU i changes: move it between "fits" and "below" per demand.
		for e := range f.demands {
			dd := &f.demands[e]
			after.fit[e], after.below[e] = b.fit[e], b.below[e]
			if fitsUsage(g, old, dd) {
				after.fit[e]--
			} else {
				after.below[e] -= b.share[i]
			}
			if fitsUsage(g, u, dd) {
				after.fit[e]++
			} else {
				after.below[e] += share
			}
		}
		scores[k] = -f.frag(after, cpu, mem)
	}
}

// Fragmentation returns the node's fragmentation for a workload: the
// weighted sum over shapes of the free GPU share (per-mille) each shape
// could not use. Divide by the total weight for the expected unusable share.
func Fragmentation(s *NodeState, workload []Shape) int64 {
	f := newFGDShapes(workload)
	var b fragBase
	f.fill(&b, s)
	return f.frag(&b, s.FreeCPU(), s.FreeMemory())
}
