package alloc

// Normalisers of the published best-fit policy (the largest node in the
// openb trace: 128 CPUs, 8 GPUs).
const (
	bestFitMaxCPU   = 128_000 // milli-CPU
	bestFitMaxShare = 8_000   // per-mille GPU
)

// bestFit is the BestFit baseline of the FGD paper: the node with the least
// left over after placement, counting CPU and GPU half each against the
// largest node in the cluster,
//
//	Primary = -( (freeCPU'/128000)/2 + (freeGPU'/8000)/2 ) * 1e9
//
// where freeCPU' is milli-CPU and freeGPU' the sum of FreeShare after
// placement. Its GPU choice is binpack's (fullest GPU that fits), as in the
// paper's simulator.
type bestFit struct{}

func (bestFit) ratesShape() bool { return true }

func (bestFit) ScoreNode(_, after *NodeState, _ *PodRequest) Score {
	var share int64
	for i := range after.GPUs {
		share += after.FreeShare(i)
	}
	return bestFitScore(after.FreeCPU(), share)
}

// bestFitScore rates freeCPU milli-CPU and share per-mille GPU left over.
// Both halves share the denominator 2*128000*8000 to stay in integers.
func bestFitScore(freeCPU, share int64) Score {
	left := freeCPU*bestFitMaxShare + share*bestFitMaxCPU
	return Score{Primary: -left * 1_000_000_000 / (2 * bestFitMaxCPU * bestFitMaxShare)}
}

func (bestFit) bounds(*PodRequest) bool { return true }

// bound: the free share falls by at most maxGrowth (and not below 0);
// CPU is exact.
func (bestFit) bound(s *NodeState, e *memoEntry, pod *PodRequest, ds []demand) Score {
	share := max(e.healthyN*1000-e.used-e.maxGrowth(ds), 0)
	return bestFitScore(s.FreeCPU()-pod.CPUMilli, share)
}
