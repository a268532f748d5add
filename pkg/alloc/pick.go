package alloc

// Decision is the outcome of Pick.
type Decision struct {
	// Index is the chosen node's position in the input, -1 if none fits.
	Index     int
	Placement *Placement
	// Unfit lists why each node was rejected when none fits; nil
	// otherwise (collecting reasons costs, so Pick skips it on success).
	Unfit []*Unfit
}

// Better reports whether placement a should be chosen over b for the pod:
// the higher score wins; an exact tie goes to the higher tie hash of
// (seed, pod key, node name). The hash makes the tie-break uniform over
// equal nodes, like kube-scheduler's random choice among equal scores, yet
// repeatable. It deliberately ignores node names' order.
func Better(a, b *Placement, podKey string, seed uint64) bool {
	if c := a.Score.Compare(b.Score); c != 0 {
		return c > 0
	}
	return mix(seed, podKey, a.Node, -2) > mix(seed, podKey, b.Node, -2)
}

// Pick places pod on the best node among states, or explains why none fits.
// It changes nothing; the caller applies the placement.
func (pl *Placer) Pick(states []*NodeState, pod *PodRequest, seed uint64) Decision {
	d := Decision{Index: -1}
	for i, s := range states {
		p, _ := pl.Place(s, pod)
		if p == nil {
			continue
		}
		if d.Placement == nil || Better(p, d.Placement, pod.Key, seed) {
			d.Index, d.Placement = i, p
		}
	}
	if d.Placement == nil {
		d.Unfit = make([]*Unfit, 0, len(states))
		for _, s := range states {
			if _, u := pl.Place(s, pod); u != nil {
				d.Unfit = append(d.Unfit, u)
			}
		}
	}
	return d
}
