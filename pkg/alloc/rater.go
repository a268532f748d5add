package alloc

import (
	"sync"
	"sync/atomic"
)

// Rater rates one pod on many nodes, from many goroutines at once: a
// scheduler's per-node Filter. It gives the score Place would give, or
// why the pod does not fit, without building the placement, plus the
// node's tie-break key. With a shape-only policy, nodes of one shape and
// equal booked CPU and memory, without live samples, are rated once per
// Rater, as Pick rates them: most nodes of a young cluster, which are
// empty.
// When few rated nodes share a shape, it stops looking shapes up.
type Rater struct {
	pl      *Placer
	pod     *PodRequest
	tb      tieBreaker
	demands []demand

	mu   sync.RWMutex
	seen map[uint64]shapeRating
	// off is set once the lookups stopped paying (see shapeProbe).
	off             atomic.Bool
	lookups, misses atomic.Int64
}

// NewRater returns a Rater of pod; seed is TieBreak's.
func (pl *Placer) NewRater(pod *PodRequest, seed uint64) *Rater {
	r := &Rater{pl: pl, pod: pod, tb: newTieBreaker(pod.Key, seed), demands: demandsOf(pod, nil)}
	if pl.byShape {
		r.seen = make(map[uint64]shapeRating)
	} else {
		r.off.Store(true)
	}
	return r
}

// Rating is a pod's score on one node, with the node's tie-break key
// (TieBreak): of equal scores, the higher key wins.
type Rating struct {
	Score Score
	Tie   uint64
}

// Rate rates the pod on the node in state s, which it does not change,
// or says why the pod does not fit there. s must not change during the
// call (hold the lock that guards it).
func (r *Rater) Rate(s *NodeState) (Rating, *Unfit) {
	sum := s.Summarize()
	return r.RateSummary(s, &sum)
}

// RateSummary is Rate of s, whose Summary as it is now is sum: a node of
// a shape already rated costs reading sum alone.
func (r *Rater) RateSummary(s *NodeState, sum *Summary) (Rating, *Unfit) {
	if !sum.quick || r.off.Load() || !sum.quickFit(r.pod) {
		return r.rate(s)
	}
	return r.rateShape(s, sum)
}

// rateShape is Rate of s, whose Summary is sum, by its shape.
func (r *Rater) rateShape(s *NodeState, sum *Summary) (Rating, *Unfit) {
	if sum.mayFit(r.demands) >= 0 {
		return r.rate(s) // it says why
	}
	k := sum.key()
	r.mu.RLock()
	got, hit := r.seen[k]
	r.mu.RUnlock()
	hit = hit && got.rates(sum.shape, sum.cpu, sum.mem)
	if n := r.lookups.Add(1); !hit && 2*r.misses.Add(1) > n && n >= shapeProbe {
		r.off.Store(true) // mostly distinct shapes
	}
	if hit && got.fits {
		return Rating{Score: r.pl.namedBy(got.score, sum.nameHash), Tie: r.tb.of(sum.nodeKey)}, nil
	}
	if hit {
		return r.rate(s)
	}
	sc := r.pl.scratch.Get().(*scratch)
	defer r.pl.scratch.Put(sc)
	// The memo entry as it is now, with what the policy stored in it.
	got = r.pl.rate(sc, s, s.summary(), r.pod)
	r.mu.Lock()
	if _, taken := r.seen[k]; !taken {
		r.seen[k] = got
	}
	r.mu.Unlock()
	if !got.fits {
		return r.rate(s)
	}
	return Rating{Score: r.pl.namedBy(got.score, sum.nameHash), Tie: r.tb.of(sum.nodeKey)}, nil
}

// rate is Rate without the shape lookup.
func (r *Rater) rate(s *NodeState) (Rating, *Unfit) {
	sc := r.pl.scratch.Get().(*scratch)
	defer r.pl.scratch.Put(sc)
	score, failed := r.pl.evaluate(sc, s, r.pod)
	switch {
	case failed == len(r.pod.Containers):
		return Rating{}, nodeUnfit(s, r.pod)
	case failed >= 0:
		return Rating{}, sc.unfit
	}
	// evaluate left s's memo entry, with its node key, in sc.work.
	return Rating{Score: score, Tie: r.tb.of(sc.work.origin.nodeKey)}, nil
}
