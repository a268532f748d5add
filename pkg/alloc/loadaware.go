package alloc

// loadAware is binpack that also reads live use (NodeState.Live). A GPU's
// pressure, in permille, is the larger of
//
//	unbooked = (live memory - booked memory) * 1000 / GPU memory
//	busy     = live utilization * 10
//
// (0 without a valid sample). Unbooked memory is in use by something the
// bookings do not know of, such as a process outside Kubernetes, or a pod
// over its share; busy is the engine's load. Pressure is taken in steps
// of 100 permille so that small noise does not reorder nodes.
//
// GPU score: minus the pressure step, then binpack's; so a GPU whose
// booked share is low but whose real memory use is high is not chosen
// first. Node score: Primary is minus the mean pressure step of the
// node's healthy GPUs after placement, Secondary binpack's Primary.
// Without live samples it is binpack.
type loadAware struct{}

func (loadAware) ratesShape() bool { return true }

func (loadAware) ScoreNode(before, after *NodeState, pod *PodRequest) Score {
	var sum, n int64
	for i := range after.GPUs {
		if after.Node.GPUs[i].Healthy {
			sum += pressureStep(after, i)
			n++
		}
	}
	mean := int64(0)
	if n > 0 {
		mean = sum / n
	}
	return Score{Primary: -mean, Secondary: binpack{}.ScoreNode(before, after, pod).Primary}
}

func (loadAware) ScoreGPUs(s *NodeState, pod *PodRequest, d Demand, candidates []int, scores []int64) {
	binpack{}.ScoreGPUs(s, pod, d, candidates, scores)
	for k, i := range candidates {
		// Binpack's scores are within -1000..0: a pressure step
		// outweighs any of them.
		scores[k] -= pressureStep(s, i) * 10
	}
}

// pressureStep is a GPU's pressure rounded down to 100 permille.
func pressureStep(s *NodeState, i int) int64 {
	if i >= len(s.Live) || !s.Live[i].Valid {
		return 0
	}
	l, g := s.Live[i], s.Node.GPUs[i]
	var unbooked int64
	if g.MemoryMiB > 0 {
		unbooked = max(l.MemoryMiB-s.GPUs[i].MemoryMiB, 0) * 1000 / g.MemoryMiB
	}
	p := max(unbooked, min(l.Utilization, 100)*10)
	return p / 100 * 100
}
