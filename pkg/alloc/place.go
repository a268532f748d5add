package alloc

import (
	"cmp"
	"slices"
	"sync"
)

// Assignment is a share of one GPU.
type Assignment struct {
	GPU  int
	UUID string
	Usage
}

// ContainerPlacement is the GPUs one container gets.
type ContainerPlacement struct {
	Name string
	Kind ContainerKind
	GPUs []Assignment
}

// Placement is a pod's allocation on one node: what each container gets,
// and what the pod books on each GPU (init containers reuse what app
// containers book, as Kubernetes does for CPU and memory).
type Placement struct {
	Node       string
	CPUMilli   int64
	MemoryMiB  int64
	Containers []ContainerPlacement
	// Booked is the pod's total per GPU, in GPU index order.
	Booked []Assignment
	// Score is the node-level policy's rating of this placement.
	Score Score
}

// Placer places pods on nodes with one node-level and one GPU-level policy.
// It holds no mutable state, so one Placer serves concurrent callers.
type Placer struct {
	// cfg is what the Placer was built from (see Reweigh).
	cfg  Config
	node NodeScorer
	gpu  GPUScorer
	// topology makes multi-GPU choices prefer NVLink peers and one NUMA node.
	topology bool
	// byShape says both policies rate by shape alone (see pickRange);
	// shapes pools pickRange's maps.
	byShape bool
	shapes  *sync.Pool
	// renames says the node policy is nameKeyed: a score rated on
	// another node of the shape takes the node's own name bits.
	renames bool
	// scratch holds Raters' buffers: rating a node allocates nothing
	// but the reasons a pod does not fit.
	scratch *sync.Pool
	// bounder is the node policy if it can bound scores (see pickRange).
	bounder bounder
}

// Place tries to place pod on the node in state s, which it does not change.
// It returns the placement, or why the pod does not fit.
func (pl *Placer) Place(s *NodeState, pod *PodRequest) (*Placement, *Unfit) {
	var sc scratch
	score, failed := pl.evaluate(&sc, s, pod)
	switch {
	case failed == len(pod.Containers):
		return nil, nodeUnfit(s, pod)
	case failed >= 0:
		return nil, sc.unfit
	}
	p := &Placement{Node: s.Node.Name, CPUMilli: pod.CPUMilli, MemoryMiB: pod.MemoryMiB, Score: score,
		Containers: make([]ContainerPlacement, len(pod.Containers))}
	for i := range pod.Containers {
		c := &pod.Containers[i]
		d := c.PerGPU()
		got := ContainerPlacement{Name: c.Name, Kind: c.Kind, GPUs: make([]Assignment, 0, len(sc.chosen[i]))}
		for _, g := range sc.chosen[i] {
			got.GPUs = append(got.GPUs, Assignment{GPU: g, UUID: s.Node.GPUs[g].UUID, Usage: d.usageOn(&s.Node.GPUs[g])})
		}
		p.Containers[i] = got
	}
	for g := range s.GPUs {
		if u := sc.work.GPUs[g].sub(s.GPUs[g]); u != (Usage{}) {
			p.Booked = append(p.Booked, Assignment{GPU: g, UUID: s.Node.GPUs[g].UUID, Usage: u})
		}
	}
	return p, nil
}

// scratch holds the buffers of one evaluation; Pick reuses one across
// nodes so that rating a node allocates nothing.
type scratch struct {
	work, phase       NodeState
	workBuf, phaseBuf []Usage
	sidecars          []Usage
	booked            []Usage
	candidates, order []int
	scores            []int64
	chosen            [][]int
	unfit             *Unfit
	// quiet skips building unfit: Pick needs only whether a node fits;
	// demands are then the pod's (demandsOf).
	quiet   bool
	demands []demand
}

// reset makes sc.work a pristine working copy of s, whose memo entry is e.
func (sc *scratch) reset(s *NodeState, e *memoEntry, containers int) {
	copyState(&sc.work, &sc.workBuf, s)
	sc.work.origin, sc.work.pristine = e, true
	for len(sc.chosen) < containers {
		sc.chosen = append(sc.chosen, nil)
	}
	sc.unfit = nil
}

// copyState makes dst a working copy of s whose GPU usage lives in *buf.
// The copy has no memo: it changes as containers are placed on it.
func copyState(dst *NodeState, buf *[]Usage, s *NodeState) {
	*buf = append((*buf)[:0], s.GPUs...)
	*dst = *s
	dst.GPUs = *buf
	dst.memo, dst.origin, dst.pristine = nil, nil, false
}

func resetUsage(u []Usage, n int) []Usage {
	u = u[:0]
	for range n {
		u = append(u, Usage{})
	}
	return u
}

// evaluate places pod on a copy of s in sc and scores it. It returns the
// index of the first container that does not fit, len(Containers) if the
// node as a whole does not fit, or -1 on success.
func (pl *Placer) evaluate(sc *scratch, s *NodeState, pod *PodRequest) (Score, int) {
	if !quickFit(s, pod) {
		return Score{}, len(pod.Containers)
	}
	e := s.summary()
	if sc.quiet {
		if i := e.mayFit(sc.demands); i >= 0 {
			return Score{}, i
		}
	}
	return pl.evaluateFit(sc, s, e, pod)
}

// evaluateFit is evaluate past the node-wide checks; e is s's memo entry.
func (pl *Placer) evaluateFit(sc *scratch, s *NodeState, e *memoEntry, pod *PodRequest) (Score, int) {
	sc.reset(s, e, len(pod.Containers))
	// The app phase: sidecars and app containers run together.
	for i := range pod.Containers {
		c := &pod.Containers[i]
		if c.Kind == Init {
			continue
		}
		if !pl.placeContainer(sc, &sc.work, pod, c, i) {
			return Score{}, i
		}
		sc.work.pristine = false
	}
	// Each init container runs alone beside the sidecars declared before
	// it; the pod books the most any phase uses. Without init containers
	// the pod books what the app phase placed on work.
	if hasInit(pod) {
		sc.sidecars = resetUsage(sc.sidecars, len(s.GPUs))
		sc.booked = resetUsage(sc.booked, len(s.GPUs))
		for g := range sc.booked {
			sc.booked[g] = sc.work.GPUs[g].sub(s.GPUs[g])
		}
		for i := range pod.Containers {
			c := &pod.Containers[i]
			d := c.PerGPU()
			switch c.Kind {
			case Sidecar:
				for _, g := range sc.chosen[i] {
					sc.sidecars[g] = sc.sidecars[g].add(d.usageOn(&s.Node.GPUs[g]))
				}
			case Init:
				copyState(&sc.phase, &sc.phaseBuf, s)
				for g, u := range sc.sidecars {
					sc.phase.GPUs[g] = sc.phase.GPUs[g].add(u)
				}
				if !pl.placeContainer(sc, &sc.phase, pod, c, i) {
					return Score{}, i
				}
				for g := range sc.booked {
					sc.booked[g] = sc.booked[g].max(sc.phase.GPUs[g].sub(s.GPUs[g]))
				}
			}
		}
		for g, u := range sc.booked {
			sc.work.GPUs[g] = s.GPUs[g].add(u)
		}
	}
	sc.work.CPUMilli += pod.CPUMilli
	sc.work.MemoryMiB += pod.MemoryMiB
	return pl.node.ScoreNode(s, &sc.work, pod), -1
}

// quickFit reports whether pod passes the node-wide checks: CPU, memory
// and the node's share mode.
func quickFit(s *NodeState, pod *PodRequest) bool {
	return pod.CPUMilli <= s.FreeCPU() && pod.MemoryMiB <= s.FreeMemory() && (s.Node.Mode != WholeCard || allExclusive(pod))
}

func allExclusive(pod *PodRequest) bool {
	for i := range pod.Containers {
		if !pod.Containers[i].Exclusive {
			return false
		}
	}
	return true
}

func hasInit(pod *PodRequest) bool {
	for i := range pod.Containers {
		if pod.Containers[i].Kind == Init {
			return true
		}
	}
	return false
}

// usageOn is what the demand books on GPU g: its share, or all of g.
func (d *Demand) usageOn(g *GPU) Usage {
	if d.Exclusive {
		return Usage{MemoryMiB: g.MemoryMiB, Compute: g.ComputeCapacity()}
	}
	return Usage{MemoryMiB: d.memoryOn(g), Compute: d.Compute}
}

// nodeUnfit checks what the pod needs of the node as a whole.
func nodeUnfit(s *NodeState, pod *PodRequest) *Unfit {
	var reasons []Insufficiency
	if free := s.FreeCPU(); pod.CPUMilli > free {
		reasons = append(reasons, Insufficiency{Reason: ReasonCPU, Requested: pod.CPUMilli, Free: free, Capacity: s.Node.CPUMilli})
	}
	if free := s.FreeMemory(); pod.MemoryMiB > free {
		reasons = append(reasons, Insufficiency{Reason: ReasonMemory, Requested: pod.MemoryMiB, Free: free, Capacity: s.Node.MemoryMiB})
	}
	if s.Node.Mode == WholeCard {
		for i := range pod.Containers {
			if c := &pod.Containers[i]; !c.Exclusive {
				reasons = append(reasons, Insufficiency{Reason: ReasonWholeCard, Container: c.Name})
				break
			}
		}
	}
	if reasons == nil {
		return nil
	}
	return &Unfit{Node: s.Node.Name, Reasons: reasons}
}

// placeContainer chooses GPUs for container i on work, books them there
// and records them in sc.chosen[i]. When too few GPUs fit it records why
// in sc.unfit (unless sc.quiet) and returns false.
func (pl *Placer) placeContainer(sc *scratch, work *NodeState, pod *PodRequest, c *PodContainer, i int) bool {
	d := c.PerGPU()
	need := c.GPUCount()
	// An init container books beside the app phase (sc.work): a GPU is
	// idle to it only if the app phase leaves it so.
	idle := work
	if c.Kind == Init {
		idle = &sc.work
	}
	keep := pl.keeps(idle, pod, &d, need)
	sc.candidates = sc.candidates[:0]
	for g := range work.GPUs {
		if fits(work, g, &d) && !keep.of(idle, g) {
			sc.candidates = append(sc.candidates, g)
		}
	}
	if len(sc.candidates) < need {
		if !sc.quiet {
			sc.unfit = gpuUnfit(work, idle, c, need, len(sc.candidates), &d, keep)
		}
		return false
	}
	sc.scores = slices.Grow(sc.scores[:0], len(sc.candidates))[:len(sc.candidates)]
	pl.gpu.ScoreGPUs(work, pod, d, sc.candidates, sc.scores)
	sc.chosen[i] = pl.choose(sc, work, need, sc.chosen[i][:0])
	for _, g := range sc.chosen[i] {
		work.GPUs[g] = work.GPUs[g].add(d.usageOn(&work.Node.GPUs[g]))
	}
	return true
}

// keeps says what pl keeps spare of s from demand d of pod, on need
// GPUs: nothing unless d asks part of a GPU that a partly used GPU of the
// node could take (Spare.takes).
func (pl *Placer) keeps(s *NodeState, pod *PodRequest, d *Demand, need int) kept {
	if pl.cfg.Spare == nil || d.Exclusive || idleOnly(s.Node, d) {
		return keptNone
	}
	return pl.cfg.Spare.takes(s, pod.CPUMilli, need)
}

// idleOnly reports whether only an idle GPU of n can take d: it asks all
// the compute or all the memory of every GPU that admits it. Such a
// share is a whole GPU, and is not kept off idle ones.
func idleOnly(n *Node, d *Demand) bool {
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if admits(g, d) && d.Compute < g.ComputeCapacity() && d.memoryOn(g) < g.MemoryMiB {
			return false
		}
	}
	return true
}

// gpuUnfit explains why too few GPUs of work fit a container; keep says
// which were kept spare for whole-GPU pods (the GPUs idle in idle, or
// all). They are named only if they would have made up the shortfall:
// otherwise the node lacks room whatever is kept spare, and the reason
// is that.
func gpuUnfit(work, idle *NodeState, c *PodContainer, need, usable int, d *Demand, keep kept) *Unfit {
	rejects := make([]GPUReject, 0, len(work.GPUs))
	var kept []GPUReject
	for g := range work.GPUs {
		if r, ok := checkGPU(work, g, d); !ok {
			rejects = append(rejects, r)
		} else if keep.of(idle, g) {
			kept = append(kept, GPUReject{GPU: g, Reason: ReasonGPUSpare})
		}
	}
	if usable+len(kept) >= need {
		rejects = append(rejects, kept...)
		slices.SortFunc(rejects, func(a, b GPUReject) int { return cmp.Compare(a.GPU, b.GPU) })
	} else {
		usable += len(kept)
	}
	in := containerUnfit(work, c.Name, need, usable, d, rejects)
	return &Unfit{Node: work.Node.Name, Reasons: []Insufficiency{in}, GPUs: rejects}
}

// choose picks need GPUs from candidates (ascending index) by score, ties
// to the lowest index. For several GPUs with topology on, it prefers the set
// with the most NVLink links and then the fewest NUMA nodes, and only then
// the scores.
func (pl *Placer) choose(sc *scratch, s *NodeState, need int, out []int) []int {
	candidates, scores := sc.candidates, sc.scores
	if need == 1 {
		best := 0
		for k := range scores {
			if scores[k] > scores[best] {
				best = k
			}
		}
		return append(out, candidates[best])
	}
	order := sc.order[:0]
	for i := range candidates {
		order = append(order, i)
	}
	sc.order = order
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(scores[b], scores[a]) })
	if !pl.topology || flat(s, candidates) {
		for k := range need {
			out = append(out, candidates[order[k]])
		}
		slices.Sort(out)
		return out
	}
	ranked := make([]int, len(order))
	for k, o := range order {
		ranked[k] = candidates[o]
	}
	return chooseTopology(s, need, ranked)
}

// FirstFit returns a Placer of pl's node policy and workload that gives
// a pod the lowest-index GPUs that fit, as Kubernetes' DRA allocator
// takes a node's devices, without topology: rating a node by the
// placement DRA will make there, for a claim DRA allocates.
func (pl *Placer) FirstFit() *Placer {
	ff := *pl
	ff.gpu, ff.topology = firstFit{}, false
	// First fit reads a node's GPUs in index order, which its shape
	// holds: nodes of one shape are rated once if the node policy
	// allows it.
	ff.byShape = ratesShape(pl.node) || keysName(pl.node)
	if !ff.byShape {
		ff.shapes = nil
	} else if ff.shapes == nil {
		ff.shapes = &sync.Pool{New: func() any { return make(map[uint64]shapeRating) }}
	}
	return &ff
}

// firstFit prefers the GPU of the lowest index.
type firstFit struct{}

// ratesShape: the GPUs' indexes and usage are part of a node's shape.
func (firstFit) ratesShape() bool { return true }

func (firstFit) ScoreGPUs(_ *NodeState, _ *PodRequest, _ Demand, candidates []int, scores []int64) {
	for k, i := range candidates {
		scores[k] = -int64(i)
	}
}
