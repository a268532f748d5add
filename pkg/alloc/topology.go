package alloc

import "slices"

// chooseTopology picks need GPUs from ranked (best policy score first) for a
// multi-GPU container. Sets are compared by, in order: NVLink links inside
// the set (more is better), NUMA nodes spanned (fewer is better), and the
// sum of policy ranks (lower is better). Each ranked GPU seeds a greedy set
// that adds, one at a time, the GPU with the most links into the set, then
// on a NUMA node already used, then best ranked. That is O(n^3) for n
// candidates, a few hundred steps for 8 GPUs.
func chooseTopology(s *NodeState, need int, ranked []int) []int {
	linked := func(a, b int) bool {
		return slices.Contains(s.Node.GPUs[a].Peers, b) || slices.Contains(s.Node.GPUs[b].Peers, a)
	}
	numa := func(i int) int { return s.Node.GPUs[i].NUMANode }

	var best []int
	var bestLinks, bestNUMA, bestRank int
	set := make([]int, 0, need)
	used := make([]bool, len(ranked))
	for seed := range ranked {
		set = append(set[:0], ranked[seed])
		clear(used)
		used[seed] = true
		links, rankSum := 0, seed
		for len(set) < need {
			pick, pickLinks, pickNUMA := -1, -1, false
			for r, g := range ranked {
				if used[r] {
					continue
				}
				l, sameNUMA := 0, false
				for _, m := range set {
					if linked(g, m) {
						l++
					}
					sameNUMA = sameNUMA || (numa(g) >= 0 && numa(g) == numa(m))
				}
				if l > pickLinks || (l == pickLinks && sameNUMA && !pickNUMA) {
					pick, pickLinks, pickNUMA = r, l, sameNUMA
				}
			}
			used[pick] = true
			set = append(set, ranked[pick])
			links += pickLinks
			rankSum += pick
		}
		numaNodes := countNUMA(s, set)
		if best == nil || links > bestLinks || (links == bestLinks && (numaNodes < bestNUMA || (numaNodes == bestNUMA && rankSum < bestRank))) {
			best = append(best[:0], set...)
			bestLinks, bestNUMA, bestRank = links, numaNodes, rankSum
		}
	}
	slices.Sort(best)
	return best
}

// flat reports whether topology cannot tell candidates apart: none has an
// NVLink peer and all sit on one NUMA node (or none is known). Every set
// then has the same links and NUMA count, and chooseTopology would pick
// the best-ranked GPUs.
func flat(s *NodeState, candidates []int) bool {
	for _, g := range candidates {
		gpu := &s.Node.GPUs[g]
		if len(gpu.Peers) > 0 || gpu.NUMANode != s.Node.GPUs[candidates[0]].NUMANode {
			return false
		}
	}
	return true
}

// countNUMA counts the distinct NUMA nodes of set; unknown (-1) counts as
// its own node for each GPU.
func countNUMA(s *NodeState, set []int) int {
	seen := make([]int, 0, len(set))
	n := 0
	for _, g := range set {
		k := s.Node.GPUs[g].NUMANode
		if k < 0 {
			n++
			continue
		}
		if !slices.Contains(seen, k) {
			seen = append(seen, k)
			n++
		}
	}
	return n
}
