package alloc

import (
	"cmp"
	"errors"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// the node's size (fewer GPUs first: small nodes fill up and large
	// ones keep their GPUs together for whole and multi-GPU pods), then by
	// a fixed pseudo-random order of nodes (a hash of the node name, the
	// same for every pod): ties then fill the same nodes first, as first
	// fit does, without following the order of node names.
	fgdPack
	// fgdFill is fgdPack with fragmentation counted for a stream of pods
	// of each shape instead of one pod: the free share left over once as
	// many pods of the shape as fit are placed, by GPU room (a GPU with
	// 0.6 free takes one 0.47 pod and leaves 0.13) and by the node's CPU
	// and memory (a node whose CPU runs out first strands its GPUs).
	fgdFill
	// fgdRobust is fgdFill with two changes that keep what FGD's own
	// formulation sees of model-bound and multi-GPU shapes:
	//   - CPU is counted for the workload's mix, not for each shape alone:
	//     a shape's usable share is capped by the share the node's free CPU
	//     can feed at the mix's CPU per GPU share (other shapes' pods use
	//     the GPUs that CPU-heavy ones would strand), and a shape needs the
	//     CPU of one pod. Counting each shape alone drew CPU-heavy pods to
	//     CPU-rich nodes (T4: 52 CPUs per GPU, G2: 12), whatever their
	//     model, and cost multi-GPU workloads 0.2-0.3 points against fgd.
	//   - Ties of the rounded growth break by the supply cost and the
	//     CPU deficit (below), then by the share the pod takes times the
	//     weight of the shapes that no GPU of the node admits (FGD's
	//     model signal:
	//     those shapes' fragmentation falls by the pod's share), then by
	//     fewer GPUs, then by the growth of the GPUs' fragmentation with
	//     the node's CPU left out (per-mille per pod, not rounded), then
	//     by the node hash. The model signal is a few hundredths of a
	//     GPU, under the rounding; without it, fewer GPUs first filled
	//     the 2-GPU T4 and P100 nodes that model-bound pods need.
	//   - Given the cluster's supply of GPUs per model and what is free
	//     of them (Options.Supply), what the pod spends of the node (its
	//     GPU share, and the growth the node's CPU accounts for) times the node's
	//     pressure (how much of the workload needs the node's models,
	//     against how little of the cluster's free share they hold) grows
	//     the fragmentation above a threshold and breaks ties before the
	//     model signal. Per node, the weights cannot tell
	//     that a model's 265 GPUs serve a tenth of the workload while
	//     another's 4,392 serve any pod: without it, free pods took the
	//     scarce GPUs and model-bound pods found none (gpuspec25: 7.86%
	//     unallocated against 5.03%). The pressures weigh the whole mix
	//     (Options.Mix): pods bound to a scarce model are often too rare
	//     to be among the heaviest shapes.
	//   - After the supply cost, ties break by the growth of the node's
	//     CPU deficit: the free GPU share its free CPU could not feed at
	//     the CPU per GPU the workload's GPU pods ask (cpuBalance; off
	//     when the whole mix asks more CPU per GPU than the cluster has).
	fgdRobust
)

// fgdMaxGPUs bounds the GPU count in fgdPack's tie-break key.
const fgdMaxGPUs = 1 << 12

// robustMaxGPUs bounds the GPU count in fgdRobust's tie-break key, which
// holds more fields than fgdPack's: nodes of 63 GPUs or more tie on it.
const robustMaxGPUs = 1<<6 - 1

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
	// For fgdRobust, per demand: the weight of its shapes (denied when no
	// GPU admits it), Σ weight x CPU and Σ weight x GPU count.
	groupW, groupCPU, groupGPUs []int64
	// terms are the GPU shapes as fragFill reads them, packed and
	// grouped by demand: demand k's are terms[termsAt[k]:termsAt[k+1]],
	// of weight termsW[k] in all. freeW weighs the shapes without GPUs.
	terms   []fragTerm
	termsAt []int
	termsW  []int64
	freeW   int64
	mode    fgdMode
	// pressed is, for fgdRobust, the pressure of the demand bound to each
	// set of models on the GPUs that admit it (see pressures); nil
	// without a supply. byModel is the sum of those that admit a GPU
	// of each model of the supply.
	pressed []bound
	byModel map[string]int64
	// scarcity is, per model of the supply, how few GPUs of it the
	// cluster has against its most plentiful model's (see scarcityOf);
	// nil while no demand is bound to models.
	scarcity map[string]int64
	// cpuPerGPU is the CPU (milli) the workload's GPU pods ask per GPU,
	// for fgdRobust's CPU tie-break; 0 without it (cpuBalance).
	cpuPerGPU int64
	pool      *sync.Pool // of scratch *fragBase, reused across calls
	// memo owns the fragBase values this policy memoises with node
	// states. A fragBase depends on the mode and the demands alone, not
	// on the shapes' weights, CPU or counts, so a re-weighed policy with
	// the same demands shares its predecessor's (see Placer.Reweigh).
	memo *fgdMemo
	// weighs identifies the shapes and weights this policy's
	// fragmentation sums weigh (fragLast): a re-supplied policy keeps its
	// predecessor's, since the supply does not enter them.
	weighs *weighing
}

// fragTerm is what fragFill reads of a GPU shape: its weight, GPU count,
// CPU and memory. fragFill walks them for every placement it rates.
type fragTerm struct {
	weight, count, cpu, mem int64
}

// weighing is the identity of an fgd's shapes and weights.
type weighing struct{ _ byte }

// fgdMemo is the identity of an fgd's memoised data.
type fgdMemo struct{ _ byte }

// ratesShape: fgd-pack and fgd-fill break ties by a hash of the node's name.
func (f *fgd) ratesShape() bool { return f.mode == fgdPlain }

// keysName: the modes that break ties by the node's name do so in its
// name bits alone.
func (f *fgd) keysName() bool { return f.mode != fgdPlain }

// fills reports whether the mode counts fragmentation for streams of pods.
func (f *fgd) fills() bool { return f.mode == fgdFill || f.mode == fgdRobust }

func newFGD(o Options, mode fgdMode) (*fgd, error) {
	if len(o.Workload) == 0 {
		return nil, errNoWorkload
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
	f.weighSupply(o)
	return f, nil
}

// weighSupply has fgdRobust weigh o's supply against o's mix: the
// pressures and the CPU per GPU. Other modes weigh no supply.
func (f *fgd) weighSupply(o Options) {
	if f.mode != fgdRobust {
		return
	}
	mix := o.Mix
	if len(mix) == 0 {
		mix = o.Workload
	}
	f.pressed = pressures(mix, o.Supply)
	f.byModel = modelPressures(f.pressed, o.Supply)
	f.scarcity = nil
	if len(f.pressed) > 0 {
		f.scarcity = scarcityOf(o.Supply)
	}
	f.cpuPerGPU = cpuBalance(o.Workload, mix, o.Supply)
}

// resupplied returns f weighing o's supply (o's workload and mix are
// f's): it shares f's shapes, what f derived from them, and the nodes'
// data f memoised, fragmentation sums included, which the supply does
// not enter.
func (f *fgd) resupplied(o Options) *fgd {
	n := *f
	n.weighSupply(o)
	return &n
}

// cpuBalance returns the CPU the GPU pods of workload ask per GPU, in
// milli-CPU, for fgd-robust's CPU tie-break (see cpuDeficit); 0 when
// they ask none, or when the CPU is short: the pods of mix, those without
// GPUs included, ask more CPU per GPU than the cluster's nodes have per
// GPU (supply). Then GPUs strand on CPU wherever pods go, and keeping a
// node's CPU for its GPUs only spends the CPU that whole-GPU pods need
// elsewhere (openb cpu250: 5.49% unallocated without the tie-break, 5.66%
// with it).
func cpuBalance(workload, mix []Shape, supply []Supply) int64 {
	var largest int64
	for i := range supply {
		largest = max(largest, supply[i].MemoryMiB)
	}
	perGPU := func(shapes []Shape, cpuOnly bool) float64 {
		var cpu, share float64
		for q := range shapes {
			sh := &shapes[q]
			if sh.Weight <= 0 || (sh.Count <= 0 && !cpuOnly) {
				continue
			}
			cpu += float64(sh.Weight) * float64(max(sh.CPUMilli, 0))
			share += float64(sh.Weight) * float64(max(sh.Count, 0)) * float64(demandShare(&sh.Demand, largest))
		}
		if share <= 0 {
			return 0
		}
		return 1000 * cpu / share
	}
	asked := perGPU(workload, false)
	var haveCPU, haveGPUs float64
	for i := range supply {
		haveCPU += float64(supply[i].CPUMilli)
		haveGPUs += float64(supply[i].GPUs)
	}
	if haveCPU > 0 && haveGPUs > 0 && perGPU(mix, true) > haveCPU/haveGPUs {
		return 0
	}
	return int64(math.Round(asked))
}

// demandShare is one GPU's share of d in per-mille, on a GPU of largest
// MiB when d asks memory alone: all of it for an exclusive demand, or
// when neither says.
func demandShare(d *Demand, largest int64) int64 {
	switch {
	case d.Exclusive:
	case d.Compute > 0:
		return min(d.Compute*1000/FullCompute, 1000)
	case d.MemoryPercent > 0:
		return min(d.MemoryPercent*10, 1000)
	case d.MemoryMiB > 0 && largest > 0:
		return min(d.MemoryMiB*1000/largest, 1000)
	}
	return 1000
}

// cpuDeficit is the free GPU share, in millionths of a GPU, that a node's
// free CPU (milli) could not feed if the pods to come asked CPU per GPU as
// f's workload does: 0 on a node with CPU to spare.
func (f *fgd) cpuDeficit(cpu, share int64) int64 {
	fed := float64(max(cpu, 0)) * 1e6 / float64(f.cpuPerGPU)
	return int64(max(float64(share)*1000-fed, 0))
}

// inherit makes f share prev's memoised node data when both derive the
// same: same mode and demands, in the same (canonical) order.
func (f *fgd) inherit(prev *fgd) {
	if f.mode == prev.mode && slices.EqualFunc(f.demands, prev.demands, sameDemand) {
		f.memo = prev.memo
	}
}

func sameDemand(a, b Demand) bool {
	return a.MemoryMiB == b.MemoryMiB && a.MemoryPercent == b.MemoryPercent && a.Compute == b.Compute && a.Exclusive == b.Exclusive && a.MPS == b.MPS && slices.Equal(a.Models, b.Models) && equalFilters(a.Filter, b.Filter)
}

// compareDemand orders demands canonically, whatever the shapes' order.
func compareDemand(a, b Demand) int {
	return cmp.Or(cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.MemoryPercent, b.MemoryPercent), cmp.Compare(a.Compute, b.Compute),
		compareBool(a.Exclusive, b.Exclusive), compareBool(a.MPS, b.MPS), slices.Compare(a.Models, b.Models),
		strings.Compare(a.Filter.String(), b.Filter.String()))
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func newFGDShapes(shapes []Shape) *fgd {
	f := &fgd{shapes: shapes, group: make([]int, len(shapes)), memo: new(fgdMemo), weighs: new(weighing),
		pool: &sync.Pool{New: func() any { return new(fragBase) }}}
	for q := range shapes {
		f.weight += shapes[q].Weight
		if shapes[q].Count > 0 && !slices.ContainsFunc(f.demands, func(e Demand) bool { return sameDemand(e, shapes[q].Demand) }) {
			f.demands = append(f.demands, shapes[q].Demand)
		}
	}
	slices.SortFunc(f.demands, compareDemand)
	for q := range shapes {
		f.group[q] = -1
		if shapes[q].Count > 0 {
			f.group[q] = slices.IndexFunc(f.demands, func(e Demand) bool { return sameDemand(e, shapes[q].Demand) })
		}
	}
	f.termsAt = make([]int, len(f.demands)+1)
	f.termsW = make([]int64, len(f.demands))
	for k := range f.demands {
		f.termsAt[k] = len(f.terms)
		for q := range shapes {
			if sh := &shapes[q]; f.group[q] == k {
				f.terms = append(f.terms, fragTerm{weight: sh.Weight, count: int64(sh.Count), cpu: sh.CPUMilli, mem: sh.MemoryMiB})
				f.termsW[k] += sh.Weight
			}
		}
	}
	f.termsAt[len(f.demands)] = len(f.terms)
	for q := range shapes {
		if f.group[q] < 0 {
			f.freeW += shapes[q].Weight
		}
	}
	f.groupW = make([]int64, len(f.demands))
	f.groupCPU = make([]int64, len(f.demands))
	f.groupGPUs = make([]int64, len(f.demands))
	for q, k := range f.group {
		if k >= 0 {
			w := shapes[q].Weight
			f.groupW[k] += w
			f.groupCPU[k] += w * shapes[q].CPUMilli
			f.groupGPUs[k] += w * int64(shapes[q].Count)
		}
	}
	return f
}

// fragBase is what the per-GPU update needs about a node.
type fragBase struct {
	share []int64 // free share per GPU
	total int64
	fit   []int   // per demand: GPUs that fit it
	below []int64 // per demand: free share on GPUs that don't
	// For fgdFill, per demand: how many of it fit, summed over GPUs, and
	// the share they take.
	units []int64
	used  []int64
	// For fgdRobust, per demand: whether no GPU of the node admits it.
	denied []bool
	// For fgdFill and fgdRobust, per GPU and demand (index GPU x
	// demands + demand): whether the GPU admits the demand at all. A
	// base's, read by move; copyFrom leaves it.
	admit []bool
	// last holds the fragmentation of a memoised fragBase as a policy
	// last weighed it: the node's state it describes is rated for pod
	// after pod, and most decisions leave it as it was.
	last atomic.Pointer[fragLast]
}

// fragLast is a fragBase's fragmentation under one weighing of shapes,
// with the node's free CPU and memory: frag and, for fgdRobust, the
// fragmentation with the node's CPU left out.
type fragLast struct {
	weighs                  *weighing
	cpu, mem, frag, gpuFrag int64
}

// fragOf returns b's fragmentation, and for fgdRobust the one with the
// node's CPU left out, given the node's free CPU and memory.
func (f *fgd) fragOf(b *fragBase, cpu, mem int64) (frag, gpuFrag int64) {
	if l := b.last.Load(); l != nil && l.weighs == f.weighs && l.cpu == cpu && l.mem == mem {
		return l.frag, l.gpuFrag
	}
	frag, gpuFrag = f.fragPair(b, cpu, mem)
	b.last.Store(&fragLast{weighs: f.weighs, cpu: cpu, mem: mem, frag: frag, gpuFrag: gpuFrag})
	return frag, gpuFrag
}

// fragPair returns b's fragmentation and, for fgdRobust, the one with
// the node's CPU left out (0 otherwise), given the node's free CPU and
// memory.
func (f *fgd) fragPair(b *fragBase, cpu, mem int64) (frag, gpuFrag int64) {
	if f.mode == fgdRobust {
		return f.fragFill(b, cpu, mem, true)
	}
	return f.frag(b, cpu, mem), 0
}

// unitsOn returns how many of demand d fit GPU g at usage u side by side,
// and the share of g they take together, for a GPU that admits d
// (admits).
func unitsOn(g *GPU, u Usage, d *Demand) (n, share int64) {
	if d.Exclusive {
		if u == (Usage{}) {
			return 1, 1000
		}
		return 0, 0
	}
	n = 1 << 20
	var per int64
	if m := d.memoryOn(g); m > 0 {
		n = min(n, (g.MemoryMiB-u.MemoryMiB)/m)
		per = max(per, m*1000/g.MemoryMiB)
	}
	if c := g.ComputeCapacity(); d.Compute > 0 {
		n = min(n, (c-u.Compute)/d.Compute)
		per = max(per, d.Compute*1000/c)
	}
	if per == 0 || n < 0 {
		return 0, 0
	}
	return n, n * per
}

// baseOf returns the fragBase of e's state: the one memoised with e, or
// a fresh one derived from s (which e matches, if not nil).
func (f *fgd) baseOf(e *memoEntry, s *NodeState) (b *fragBase, fresh bool) {
	if e != nil && e.owner == f.memo {
		return e.value.(*fragBase), false
	}
	b = new(fragBase)
	f.fill(b, s)
	return b, true
}

func (f *fgd) fill(b *fragBase, s *NodeState) {
	// Each mode sizes only the counts it reads, so copyFrom copies no
	// others on the hot path.
	n, m := len(f.demands), 0
	if f.fills() {
		n, m = 0, len(f.demands)
	}
	b.fit = slices.Grow(b.fit[:0], n)[:n]
	b.below = slices.Grow(b.below[:0], n)[:n]
	b.units = slices.Grow(b.units[:0], m)[:m]
	b.used = slices.Grow(b.used[:0], m)[:m]
	clear(b.fit)
	clear(b.below)
	clear(b.units)
	clear(b.used)
	b.share = s.freeShares(b.share)
	b.total = 0
	b.denied = b.denied[:0]
	b.admit = b.admit[:0]
	for _, v := range b.share {
		b.total += v
	}
	if f.fills() {
		b.admit = slices.Grow(b.admit, len(s.GPUs)*m)[:len(s.GPUs)*m]
	}
	for k := range f.demands {
		d := &f.demands[k]
		if f.mode == fgdRobust {
			b.denied = append(b.denied, !slices.ContainsFunc(s.Node.GPUs, func(g GPU) bool { return admits(&g, d) }))
		}
		for i := range s.GPUs {
			if f.fills() {
				g := &s.Node.GPUs[i]
				a := admits(g, d)
				b.admit[i*m+k] = a
				if a {
					n, sh := unitsOn(g, s.GPUs[i], d)
					b.units[k] += n
					b.used[k] += sh
				}
			} else if fits(s, i, d) {
				b.fit[k]++
			} else {
				b.below[k] += b.share[i]
			}
		}
	}
}

// move sets dst to b with GPU g (of kind gpu) going from usage old to
// usage u: only that GPU moves between "fits" and "below" per demand
// (for fgdFill: only its units change).
func (f *fgd) move(dst, b *fragBase, gpu *GPU, g int, old, u Usage) {
	share := shareOf(gpu, u)
	dst.total += share - b.share[g]
	for e := range f.demands {
		d := &f.demands[e]
		if f.fills() {
			if !b.admit[g*len(f.demands)+e] {
				continue // no unit of d on it, before or after
			}
			n0, s0 := unitsOn(gpu, old, d)
			n1, s1 := unitsOn(gpu, u, d)
			dst.units[e] += n1 - n0
			dst.used[e] += s1 - s0
			continue
		}
		if fitsUsage(gpu, old, d) {
			dst.fit[e]--
		} else {
			dst.below[e] -= b.share[g]
		}
		if fitsUsage(gpu, u, d) {
			dst.fit[e]++
		} else {
			dst.below[e] += share
		}
	}
}

// copyFrom makes b a copy of the counts of src (not the per-GPU shares).
func (b *fragBase) copyFrom(src *fragBase) {
	b.total = src.total
	b.denied = append(b.denied[:0], src.denied...)
	b.fit = append(b.fit[:0], src.fit...)
	b.below = append(b.below[:0], src.below...)
	b.units = append(b.units[:0], src.units...)
	b.used = append(b.used[:0], src.used...)
}

// frag sums the weighted fragmentation given the node's free CPU and memory.
func (f *fgd) frag(b *fragBase, cpu, mem int64) int64 {
	if f.fills() {
		frag, _ := f.fragFill(b, cpu, mem, false)
		return frag
	}
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

// fragFill is frag for fgdFill: per shape, the free share left unused
// once as many pods of the shape as fit are placed. n pods take n/units of
// the share that all units that fit the GPUs would take.
//
// fgdRobust counts CPU for the mix instead: usable share is capped by the
// share the node's CPU feeds at the mix's CPU per share (over the demands
// that fit the node), and a shape needs the CPU of one pod.
//
// With gpuOnly, fgdRobust's fragFill also returns gpuFrag, the same sum
// with the node's CPU left out (its last tie-break), from the same pass.
func (f *fgd) fragFill(b *fragBase, cpu, mem int64, gpuOnly bool) (frag, gpuFrag int64) {
	robust := f.mode == fgdRobust
	room := int64(-1) // the share the node's CPU feeds; -1: no cap
	if robust {
		var perCPU, share int64 // Σ weight x CPU, Σ weight x share per pod
		for k := range f.demands {
			if b.units[k] > 0 {
				perCPU += f.groupCPU[k]
				share += f.groupGPUs[k] * b.used[k] / b.units[k]
			}
		}
		if perCPU > 0 {
			room = mulDiv(cpu, share, perCPU)
		}
	}
	// A shape no GPU of the node fits (or without GPUs) can use none of
	// the free share.
	frag = f.freeW * b.total
	gpuFrag = frag
	for k := range f.demands {
		units := b.units[k]
		if units == 0 {
			frag += f.termsW[k] * b.total
			gpuFrag += f.termsW[k] * b.total
			continue
		}
		used := b.used[k]
		// usable is the share n pods of the demand's shape take.
		usable := func(n, count int64) int64 {
			if c := n * count; c < units {
				return used * c / units
			}
			return used
		}
		for _, t := range f.terms[f.termsAt[k]:f.termsAt[k+1]] {
			// memCap caps n >= 0 pods of the shape by the node's memory:
			// n x mem > memory when, and only when, n > memory / mem, and
			// the full product saves a division.
			memCap := func(n int64) int64 {
				if t.mem <= 0 {
					return n
				}
				if hi, lo := bits.Mul64(uint64(n), uint64(t.mem)); mem < 0 || hi != 0 || lo > uint64(mem) {
					return mem / t.mem
				}
				return n
			}
			n := units
			if t.count != 1 {
				n = units / t.count
			}
			n = memCap(n)
			if gpuOnly {
				gpuFrag += t.weight * (b.total - usable(n, t.count))
			}
			switch {
			case t.cpu > 0 && robust && cpu < t.cpu:
				n = memCap(0)
			case t.cpu > 0 && !robust && cpu/t.cpu < n:
				n = cpu / t.cpu
			}
			u := usable(n, t.count)
			if room >= 0 {
				u = min(u, room)
			}
			frag += t.weight * (b.total - u)
		}
	}
	return frag, gpuFrag
}

// mulDiv returns a x b / c, truncated toward zero as Go's division is,
// for b >= 0 and c > 0, with the product in 128 bits: a quotient past
// int64 saturates. A node whose allocatable CPU is unknown counts
// record.Unlimited (2^40 milli-CPU), and times the learned weights (up
// to 10^6 per shape) the product passes int64.
func mulDiv(a, b, c int64) int64 {
	m := uint64(a)
	if a < 0 {
		m = -m
	}
	hi, lo := bits.Mul64(m, uint64(b))
	q := uint64(math.MaxInt64)
	if hi < uint64(c) {
		q, _ = bits.Div64(hi, lo, uint64(c))
		q = min(q, math.MaxInt64)
	}
	if a < 0 {
		return -int64(q)
	}
	return int64(q)
}

func (f *fgd) ScoreNode(before, after *NodeState, _ *PodRequest) Score {
	// before is the node's real state (memoised across decisions); after
	// is before plus this pod: derive it from before's GPUs that changed.
	e := originOf(before, after)
	b0, fresh := f.baseOf(e, before)
	if fresh {
		before.storePolicyMemo(f.memo, b0)
	}
	b1 := f.pool.Get().(*fragBase)
	defer f.pool.Put(b1)
	if after.Node == before.Node && len(after.GPUs) == len(before.GPUs) {
		b1.copyFrom(b0)
		for g := range after.GPUs {
			if after.GPUs[g] != before.GPUs[g] {
				f.move(b1, b0, &after.Node.GPUs[g], g, before.GPUs[g], after.GPUs[g])
			}
		}
	} else {
		f.fill(b1, after)
	}
	frag0, gpuFrag0 := f.fragOf(b0, before.FreeCPU(), before.FreeMemory())
	frag1, gpuFrag1 := f.fragPair(b1, after.FreeCPU(), after.FreeMemory())
	growth := frag1 - frag0
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
	// Ties go to nodes with fewer GPUs, then in a fixed pseudo-random
	// order of nodes.
	gpus := int64(min(len(after.Node.GPUs), fgdMaxGPUs-1))
	if f.mode == fgdRobust {
		// The supply signal: what the pod spends of the node (spent,
		// per-mille of a GPU) times the pressure on the node's GPUs (see
		// pressures), as growth above supplyThreshold, then as the first
		// tie-break. Then FGD's model signal: the GPU share the pod takes
		// times the fraction of the workload that no GPU of the node
		// admits.
		taken := max(b0.total-b1.total, 0)
		// What the pod spends of the node, for the supply signal: the
		// GPU share it takes, and the growth of the fragmentation that
		// the node's CPU accounts for (with it counted, beyond the growth
		// without it): a pod that takes little GPU but much CPU of a node
		// with scarce GPUs leaves them without the CPU their pods need.
		gpuGrowth := gpuFrag1 - gpuFrag0
		spent := taken + max(growth-gpuGrowth, 0)/f.weight
		var denied int64 // the weight of the shapes no GPU admits
		for k, no := range b0.denied {
			if no {
				denied += f.groupW[k]
			}
		}
		p := f.pressureOn(after.Node)
		if p > supplyThreshold {
			rounded += (spent*(p-supplyThreshold)/1000*supplyWeight/1000 + fgdQuantum/2) / fgdQuantum
		}
		// Fewer GPUs next; then the growth of the fragmentation with the
		// node's CPU left out (its memory still counts), per-mille of a
		// GPU per pod, not rounded, clamped at 16 GPUs either way: of
		// placements the rounded growth ties, the one that leaves the
		// free shares fit for more of the mix (counting CPU there too
		// cost the CPU-heavy openb workload, cpu250, 0.11 points); then
		// the name bits. The model signal saturates past about four GPUs
		// of share that no GPU of the node could serve.
		model := min(taken*denied<<10/f.weight, 1<<22-1)
		// The supply cost: what the pod spends of the node times its
		// pressure, plus, while some demand is bound to models, the
		// scarcity of its model: of placements that tie, the one on the
		// model the cluster has most of. The pressure counts only the
		// bound demand learned so far; the scarcity keeps pods that could
		// run anywhere off the small models' GPUs before the pods bound
		// to them have been seen (openb gpuspec33, seed 47: free pods
		// took 198 V100 GPUs in the first tenth of the arrivals, and
		// pods bound to V100 were turned away later).
		cost := min(spent*(p+f.scarcityOn(after.Node))/1000, 1<<24-1)
		fine := min(max(gpuGrowth/f.weight, 1-1<<14), 1<<14-1)
		// The CPU tie-break: of placements the rounded growth and the
		// supply cost tie, the one that grows the node's CPU deficit
		// least (per-mille of a GPU, clamped at 32 GPUs either way). A
		// CPU-heavy GPU pod goes where CPU is to spare, a CPU-light one
		// where the GPUs lack CPU. Counted before the node's size and the
		// model signal: on the openb default workload, CPU-stranded GPU
		// share was 44 of the 278 GPUs left unallocated (seed 42). Pods
		// without GPUs do not weigh it: the fragmentation already counts
		// the CPU they take, and steering them to nodes with CPU to spare
		// took the CPU that whole-GPU pods need (openb cpu250).
		// rounded counts tenths of a GPU: clamped at 200,000 GPUs either
		// way, the key below cannot overflow.
		rounded = min(max(rounded, 1-1<<21), 1<<21-1)
		var deficit int64
		if f.cpuPerGPU > 0 && taken > 0 {
			// Rounded to per-mille, half away from zero: placements
			// that differ by less are alike.
			d := f.cpuDeficit(after.FreeCPU(), b1.total) - f.cpuDeficit(before.FreeCPU(), b0.total)
			if d < 0 {
				d -= 500
			} else {
				d += 500
			}
			deficit = min(max(d/1000, 1-1<<15), 1<<15-1)
		}
		return Score{Primary: (-rounded<<24-cost)<<16 - deficit,
			Secondary: model<<41 | (robustMaxGPUs-min(gpus, robustMaxGPUs))<<35 | (1<<14-fine)<<nameBits | nameBitsOf(e)}
	}
	return Score{Primary: -rounded, Secondary: (fgdMaxGPUs-gpus)<<40 | nameBitsOf(e)}
}

// bounds: fgd bounds the scores of a pod without GPUs (bound).
func (f *fgd) bounds(pod *PodRequest) bool {
	return !pod.GPUs() && pod.CPUMilli >= 0 && pod.MemoryMiB >= 0
}

// bound is, for a pod without GPUs, a node's score at no growth. Such a
// pod takes only CPU and memory, and with less of either no shape fits
// more pods on the node's free GPU share, so the fragmentation cannot
// fall: the growth, fgd-robust's supply cost and its fine tie-break
// (the growth with the node's CPU left out) are at least 0, and the
// model signal and the CPU deficit, which count GPU share taken, are 0.
// What is left is exact: the node's GPU count and name bits. Empty
// nodes of many GPUs, which such pods would leave for GPU pods, are then
// ruled out without being rated once a node of fewer GPUs scores 0.
func (f *fgd) bound(s *NodeState, e *memoEntry, pod *PodRequest, _ []demand) Score {
	if !f.bounds(pod) {
		return Score{Primary: math.MaxInt64, Secondary: math.MaxInt64}
	}
	gpus := int64(min(len(s.Node.GPUs), fgdMaxGPUs-1))
	switch f.mode {
	case fgdPlain:
		return Score{}
	case fgdRobust:
		return Score{Secondary: (robustMaxGPUs-min(gpus, robustMaxGPUs))<<35 | 1<<14<<nameBits | nameBitsOf(e)}
	}
	return Score{Secondary: (fgdMaxGPUs-gpus)<<40 | nameBitsOf(e)}
}

func (f *fgd) ScoreGPUs(s *NodeState, pod *PodRequest, d Demand, candidates []int, scores []int64) {
	// s is the node's real state for a pod's first container (the memo
	// then hits) or a working copy with earlier containers booked.
	b, _ := f.baseOf(s.derived(), s)
	after := f.pool.Get().(*fragBase)
	defer f.pool.Put(after)
	cpu, mem := s.FreeCPU()-pod.CPUMilli, s.FreeMemory()-pod.MemoryMiB
	for k, i := range candidates {
		// A GPU identical to an earlier candidate (same kind, same usage)
		// leaves the node in the same shape: same score.
		if j := sameAs(s, candidates[:k], i); j >= 0 {
			scores[k] = scores[j]
			continue
		}
		g := &s.Node.GPUs[i]
		after.copyFrom(b)
		f.move(after, b, g, i, s.GPUs[i], s.GPUs[i].add(d.usageOn(g)))
		scores[k] = -f.frag(after, cpu, mem)
	}
}

// sameAs returns the position in earlier of a GPU of the same kind
// (model, memory, compute, health) and usage as GPU i, or -1.
func sameAs(s *NodeState, earlier []int, i int) int {
	a := &s.Node.GPUs[i]
	for k, j := range earlier {
		b := &s.Node.GPUs[j]
		if s.GPUs[j] == s.GPUs[i] && a.MemoryMiB == b.MemoryMiB && a.Compute == b.Compute && a.Healthy == b.Healthy && a.Model == b.Model {
			return k
		}
	}
	return -1
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
