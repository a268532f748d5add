package alloc

// random scores every node and GPU with a hash of (seed, pod, node, GPU):
// uniform, independent across pods, and the same for the same input, with
// no shared random source to lock.
type random struct{ seed uint64 }

func (r random) ScoreNode(_, after *NodeState, pod *PodRequest) Score {
	return Score{Primary: int64(mix(r.seed, pod.Key, after.Node.Name, -1) >> 1)}
}

func (r random) ScoreGPUs(s *NodeState, pod *PodRequest, _ Demand, candidates []int, scores []int64) {
	for k, i := range candidates {
		scores[k] = int64(mix(r.seed, pod.Key, s.Node.Name, i) >> 1)
	}
}

// mix hashes its inputs with FNV-1a and a splitmix64 finaliser.
func mix(seed uint64, a, b string, n int) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037) ^ seed
	for i := range len(a) {
		h = (h ^ uint64(a[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for i := range len(b) {
		h = (h ^ uint64(b[i])) * prime
	}
	h = (h ^ uint64(int64(n))) * prime
	return finalize(h)
}

// finalize is splitmix64's finaliser: every input bit affects every output bit.
func finalize(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
