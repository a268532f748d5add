package alloc

// binpack fills the most-used node and GPU first, keeping whole GPUs and
// nodes free for large requests.
//
// Node score: Primary is the node's booked GPU share after placement in
// parts per million of its healthy GPU capacity,
//
//	Σ_g (1000 - FreeShare(g)) * 1000 / healthy GPUs
//
// (0 for a node without healthy GPUs); Secondary is booked CPU in parts per
// million of the node's CPU. GPU score: minus the GPU's free share, so the
// fullest GPU that still fits wins (best fit).
type binpack struct{}

func (binpack) ratesShape() bool { return true }

func (binpack) ScoreNode(before, after *NodeState, _ *PodRequest) Score {
	return Score{Primary: usedSharePPMAfter(before, after), Secondary: ppm(after.CPUMilli, after.Node.CPUMilli)}
}

func (binpack) bounds(*PodRequest) bool { return true }

// bound: used grows by at most maxGrowth; CPU is exact.
func (binpack) bound(s *NodeState, e *memoEntry, pod *PodRequest, ds []demand) Score {
	return Score{Primary: usedPPM(e.used+e.maxGrowth(ds), e.healthyN), Secondary: ppm(s.CPUMilli+pod.CPUMilli, s.Node.CPUMilli)}
}

func (binpack) ScoreGPUs(s *NodeState, _ *PodRequest, _ Demand, candidates []int, scores []int64) {
	candidateShares(s, candidates, scores)
	for k := range scores {
		scores[k] = -scores[k]
	}
}

// spread is binpack reversed: the emptiest node and GPU first, which
// spreads load and interference at the cost of fragmentation.
type spread struct{}

func (spread) ratesShape() bool { return true }

func (spread) ScoreNode(before, after *NodeState, pod *PodRequest) Score {
	b := binpack{}.ScoreNode(before, after, pod)
	return Score{Primary: -b.Primary, Secondary: -b.Secondary}
}

func (spread) bounds(*PodRequest) bool { return true }

// bound: used grows by at least minGrowth; CPU is exact.
func (spread) bound(s *NodeState, e *memoEntry, pod *PodRequest, ds []demand) Score {
	return Score{Primary: -usedPPM(e.used+e.minGrowth(ds), e.healthyN), Secondary: -ppm(s.CPUMilli+pod.CPUMilli, s.Node.CPUMilli)}
}

func (spread) ScoreGPUs(s *NodeState, _ *PodRequest, _ Demand, candidates []int, scores []int64) {
	candidateShares(s, candidates, scores)
}

// candidateShares sets out[k] to the free share of GPU candidates[k].
func candidateShares(s *NodeState, candidates []int, out []int64) {
	if e := s.derived(); e != nil {
		for k, i := range candidates {
			out[k] = e.share[i]
		}
		return
	}
	for k, i := range candidates {
		out[k] = s.FreeShare(i)
	}
}

// usedSharePPM is the booked share of the node's healthy GPUs in ppm.
func usedSharePPM(s *NodeState) int64 {
	var used, n int64
	for i := range s.GPUs {
		if s.Node.GPUs[i].Healthy {
			used += 1000 - s.FreeShare(i)
			n++
		}
	}
	return usedPPM(used, n)
}

// usedSharePPMAfter is usedSharePPM(after) for after = before plus a
// placement: before's (memoised) sum, corrected on the GPUs that changed.
func usedSharePPMAfter(before, after *NodeState) int64 {
	if after.Node != before.Node || len(after.GPUs) != len(before.GPUs) {
		return usedSharePPM(after)
	}
	e := originOf(before, after)
	used := e.used
	for g := range after.GPUs {
		if after.GPUs[g] != before.GPUs[g] && after.Node.GPUs[g].Healthy {
			used += e.share[g] - after.FreeShare(g)
		}
	}
	return usedPPM(used, e.healthyN)
}

// usedPPM is used per-mille GPUs over n healthy GPUs, in ppm.
func usedPPM(used, n int64) int64 {
	if n == 0 {
		return 0
	}
	return used * 1000 / n
}

// ppm returns part/whole in parts per million, 0 when whole is 0.
func ppm(part, whole int64) int64 {
	if whole <= 0 {
		return 0
	}
	return part * 1_000_000 / whole
}
