package alloc

// Decision is the outcome of Pick.
type Decision struct {
	// Index is the chosen node's position in the input, -1 if none fits.
	Index     int
	Placement *Placement
}

// TieBreak is the key that orders nodes of equal score for a pod: the
// higher wins. The hash of (seed, pod key, node name) makes the tie-break
// uniform over equal nodes, like kube-scheduler's random choice among
// equal scores, yet repeatable; it deliberately ignores node names' order.
func TieBreak(podKey, node string, seed uint64) uint64 { return mix(seed, podKey, node, -2) }

// better reports whether a on aNode beats b on bNode: the higher score,
// then the higher TieBreak.
func better(a Score, aNode string, b Score, bNode string, podKey string, seed uint64) bool {
	if c := a.Compare(b); c != 0 {
		return c > 0
	}
	return TieBreak(podKey, aNode, seed) > TieBreak(podKey, bNode, seed)
}

// Pick places pod on the best node among states; Index is -1 when none
// fits (Explain says why). It changes nothing; the caller applies the
// placement.
func (pl *Placer) Pick(states []*NodeState, pod *PodRequest, seed uint64) Decision {
	var sc scratch
	best, bestScore := -1, Score{}
	for i, s := range states {
		score, failed := pl.evaluate(&sc, s, pod)
		if failed >= 0 {
			continue
		}
		if best < 0 || better(score, s.Node.Name, bestScore, states[best].Node.Name, pod.Key, seed) {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		return Decision{Index: -1}
	}
	p, _ := pl.Place(states[best], pod)
	return Decision{Index: best, Placement: p}
}

// Explain returns why pod does not fit each of the states it doesn't fit.
func (pl *Placer) Explain(states []*NodeState, pod *PodRequest) []*Unfit {
	var out []*Unfit
	for _, s := range states {
		if _, u := pl.Place(s, pod); u != nil {
			out = append(out, u)
		}
	}
	return out
}
