package alloc

// Decision is the outcome of Pick.
type Decision struct {
	// Index is the chosen node's position in the input, -1 if none fits.
	Index     int
	Placement *Placement
}

// Better reports whether placement a should be chosen over b for the pod:
// the higher score wins; an exact tie goes to the higher tie hash of
// (seed, pod key, node name). The hash makes the tie-break uniform over
// equal nodes, like kube-scheduler's random choice among equal scores, yet
// repeatable. It deliberately ignores node names' order.
func Better(a, b *Placement, podKey string, seed uint64) bool {
	return better(a.Score, a.Node, b.Score, b.Node, podKey, seed)
}

// TieBreak is the key that orders nodes of equal score for a pod: the
// higher wins. Better is Score.Compare, then TieBreak.
func TieBreak(podKey, node string, seed uint64) uint64 { return mix(seed, podKey, node, -2) }

func better(a Score, aNode string, b Score, bNode string, podKey string, seed uint64) bool {
	if c := a.Compare(b); c != 0 {
		return c > 0
	}
	return mix(seed, podKey, aNode, -2) > mix(seed, podKey, bNode, -2)
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
