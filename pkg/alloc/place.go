package alloc

import (
	"cmp"
	"slices"
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
	node NodeScorer
	gpu  GPUScorer
	// topology makes multi-GPU choices prefer NVLink peers and one NUMA node.
	topology bool
}

// Place tries to place pod on the node in state s, which it does not change.
// It returns the placement, or why the pod does not fit.
func (pl *Placer) Place(s *NodeState, pod *PodRequest) (*Placement, *Unfit) {
	if u := nodeUnfit(s, pod); u != nil {
		return nil, u
	}
	work := s.Clone()
	p := &Placement{Node: s.Node.Name, CPUMilli: pod.CPUMilli, MemoryMiB: pod.MemoryMiB,
		Containers: make([]ContainerPlacement, len(pod.Containers))}

	// The app phase: sidecars and app containers run together.
	sidecars := make([]Usage, len(s.GPUs))
	sidecarsBefore := make([][]Usage, len(pod.Containers))
	for i := range pod.Containers {
		c := &pod.Containers[i]
		if c.Kind == Init {
			sidecarsBefore[i] = append([]Usage(nil), sidecars...)
			continue
		}
		got, u := pl.placeContainer(work, pod, c)
		if u != nil {
			return nil, u
		}
		p.Containers[i] = got
		if c.Kind == Sidecar {
			for _, a := range got.GPUs {
				sidecars[a.GPU] = sidecars[a.GPU].add(a.Usage)
			}
		}
	}
	booked := make([]Usage, len(s.GPUs))
	for i := range booked {
		booked[i] = work.GPUs[i].sub(s.GPUs[i])
	}

	// Each init container runs alone beside the sidecars started before it.
	for i := range pod.Containers {
		c := &pod.Containers[i]
		if c.Kind != Init {
			continue
		}
		phase := s.Clone()
		for g, u := range sidecarsBefore[i] {
			phase.GPUs[g] = phase.GPUs[g].add(u)
		}
		got, u := pl.placeContainer(phase, pod, c)
		if u != nil {
			return nil, u
		}
		p.Containers[i] = got
		for g := range booked {
			booked[g] = booked[g].max(phase.GPUs[g].sub(s.GPUs[g]))
		}
	}

	for g, u := range booked {
		if u != (Usage{}) {
			p.Booked = append(p.Booked, Assignment{GPU: g, UUID: s.Node.GPUs[g].UUID, Usage: u})
			work.GPUs[g] = s.GPUs[g].add(u)
		}
	}
	work.CPUMilli += pod.CPUMilli
	work.MemoryMiB += pod.MemoryMiB
	p.Score = pl.node.ScoreNode(s, work, pod)
	return p, nil
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

// placeContainer chooses GPUs for one container on work and books them
// there.
func (pl *Placer) placeContainer(work *NodeState, pod *PodRequest, c *PodContainer) (ContainerPlacement, *Unfit) {
	d := c.PerGPU()
	need := c.GPUCount()
	candidates := make([]int, 0, len(work.GPUs))
	for i := range work.GPUs {
		if fits(work, i, &d) {
			candidates = append(candidates, i)
		}
	}
	if len(candidates) < need {
		rejects := make([]GPUReject, 0, len(work.GPUs))
		for i := range work.GPUs {
			if r, ok := checkGPU(work, i, &d); !ok {
				rejects = append(rejects, r)
			}
		}
		in := containerUnfit(work, c.Name, need, len(candidates), &d, rejects)
		return ContainerPlacement{}, &Unfit{Node: work.Node.Name, Reasons: []Insufficiency{in}, GPUs: rejects}
	}
	scores := make([]int64, len(candidates))
	pl.gpu.ScoreGPUs(work, pod, d, candidates, scores)
	chosen := pl.choose(work, need, candidates, scores)

	got := ContainerPlacement{Name: c.Name, Kind: c.Kind, GPUs: make([]Assignment, 0, need)}
	for _, i := range chosen {
		u := Usage{MemoryMiB: d.MemoryMiB, Compute: d.Compute}
		if d.Exclusive {
			g := &work.Node.GPUs[i]
			u = Usage{MemoryMiB: g.MemoryMiB, Compute: g.ComputeCapacity()}
		}
		work.GPUs[i] = work.GPUs[i].add(u)
		got.GPUs = append(got.GPUs, Assignment{GPU: i, UUID: work.Node.GPUs[i].UUID, Usage: u})
	}
	return got, nil
}

// choose picks need GPUs from candidates (ascending index) by score, ties
// to the lowest index. For several GPUs with topology on, it prefers the set
// with the most NVLink links and then the fewest NUMA nodes, and only then
// the scores.
func (pl *Placer) choose(s *NodeState, need int, candidates []int, scores []int64) []int {
	order := make([]int, len(candidates))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(scores[b], scores[a]) })
	if need == 1 || !pl.topology {
		out := make([]int, need)
		for k := range out {
			out[k] = candidates[order[k]]
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
