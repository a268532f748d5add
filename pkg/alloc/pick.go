package alloc

import (
	"runtime"
	"sync"
	"unique"
)

// Decision is the outcome of Pick.
type Decision struct {
	// Index is the chosen node's position in the input, -1 if none fits.
	Index     int
	Placement *Placement
}

// TieBreak is the key that orders nodes of equal score for a pod: the
// higher wins. A hash of (seed, pod key) mixed with a hash of the node name
// makes the tie-break uniform over equal nodes, like kube-scheduler's
// random choice among equal scores, yet repeatable; it deliberately
// ignores node names' order. The node's half is memoised with its state.
func TieBreak(podKey, node string, seed uint64) uint64 {
	return newTieBreaker(podKey, seed).of(nodeKey(node))
}

// nodeKey is the node's half of TieBreak.
func nodeKey(node string) uint64 { return mix(0, "", node, -2) }

// tieBreaker is TieBreak for one pod and seed, over many nodes.
type tieBreaker uint64

func newTieBreaker(podKey string, seed uint64) tieBreaker {
	return tieBreaker(mix(seed, podKey, "", -2))
}

// of returns TieBreak for the node with nodeKey k.
func (t tieBreaker) of(k uint64) uint64 { return finalize(uint64(t) ^ k) }

// pickChunk is the fewest nodes a Pick worker rates: below it, waking
// another thread (tens of µs on a busy machine) outweighs the work. Most
// nodes cost a policy that bounds scores 50-100 ns (a lookup and a
// bound), so its chunks are larger: on 2 CPUs the openb cluster (1213
// nodes) had a higher decision p99 when split in two for binpack, and
// a lower one for fgd.
const (
	pickChunk        = 256
	pickChunkBounded = 2048
)

// Pick places pod on the best node among states; Index is -1 when none
// fits (Explain says why). It changes nothing; the caller applies the
// placement. Large node lists are rated in parallel chunks, as
// kube-scheduler filters nodes in parallel; the result is the same as a
// sequential scan (chunks merge in order, ties keep the earlier node).
func (pl *Placer) Pick(states []*NodeState, pod *PodRequest, seed uint64) Decision {
	chunk := pickChunk
	if pl.bounds(pod) {
		chunk = pickChunkBounded
	}
	workers := min(runtime.GOMAXPROCS(0), len(states)/chunk)
	var best pick
	if workers <= 1 {
		best = pl.pickRange(states, 0, pod, seed)
	} else {
		size := (len(states) + workers - 1) / workers
		workers = (len(states) + size - 1) / size // no empty chunk
		found := make([]pick, workers)
		var wg sync.WaitGroup
		for w := range workers {
			lo := w * size
			hi := min(lo+size, len(states))
			wg.Go(func() { found[w] = pl.pickRange(states[lo:hi], lo, pod, seed) })
		}
		wg.Wait()
		best = pick{index: -1}
		for _, f := range found {
			if f.index >= 0 && (best.index < 0 || f.beats(&best)) {
				best = f
			}
		}
	}
	if best.index < 0 {
		return Decision{Index: -1}
	}
	p, _ := pl.Place(states[best.index], pod)
	return Decision{Index: best.index, Placement: p}
}

// pick is the best node found so far: its index, score and tie-break key.
type pick struct {
	index int
	score Score
	tie   uint64
}

func (a *pick) beats(b *pick) bool {
	if c := a.score.Compare(b.score); c != 0 {
		return c > 0
	}
	return a.tie > b.tie
}

// pickRange finds the best of states, whose first is at index offset.
// With a shape-only policy, nodes of one shape (shapeOf) and equal booked
// CPU and memory, without live samples, are rated once: typically most
// nodes of a young cluster, which are empty. Each keeps its own
// tie-break. When few nodes share a shape, the lookup stops paying off
// and the rest of the range is rated node by node. Before a node is
// rated, its memo rules out nodes too full to fit (mayFit) and, for
// policies that bound scores, nodes that cannot beat the best so far.
func (pl *Placer) pickRange(states []*NodeState, offset int, pod *PodRequest, seed uint64) pick {
	sc := scratch{quiet: true}
	sc.demands = demandsOf(pod, make([]demand, 0, 4))
	tb := newTieBreaker(pod.Key, seed)
	best := pick{index: -1}
	var seen map[uint64]shapeRating
	if pl.byShape {
		pooled := pl.shapes.Get().(map[uint64]shapeRating)
		defer func() { clear(pooled); pl.shapes.Put(pooled) }()
		seen = pooled
	}
	lookups, misses := 0, 0
	bounded := pl.bounds(pod)
	for i, s := range states {
		var this pick
		if s.memo == nil || s.Live != nil {
			score, failed := pl.evaluate(&sc, s, pod)
			if failed >= 0 {
				continue
			}
			// evaluate left s's memo entry, with its nodeKey, in sc.work.
			this = pick{index: offset + i, score: score, tie: tb.of(sc.work.origin.nodeKey)}
		} else {
			if !quickFit(s, pod) {
				continue
			}
			e := s.summary()
			if e.mayFit(sc.demands) >= 0 {
				continue
			}
			var r shapeRating
			k := shapeKey(s, e)
			hit := false
			if seen != nil {
				r, hit = seen[k]
				hit = hit && r.of(s, e)
				if lookups++; !hit {
					if misses++; lookups >= shapeProbe && 2*misses > lookups {
						seen = nil // mostly distinct shapes
					}
				}
			}
			if !hit {
				if bounded && best.index >= 0 {
					// Skip a node that cannot beat best: its score is at
					// most the bound, and on a tie its key must win.
					c := pl.bounder.bound(s, e, pod, sc.demands).Compare(best.score)
					if c < 0 || c == 0 && tb.of(e.nodeKey) <= best.tie {
						continue
					}
				}
				r = pl.rate(&sc, s, e, pod)
				if seen != nil {
					if _, taken := seen[k]; !taken {
						seen[k] = r
					}
				}
			}
			if !r.fits {
				continue
			}
			this = pick{index: offset + i, score: pl.named(r.score, e), tie: tb.of(e.nodeKey)}
		}
		if best.index < 0 || this.beats(&best) {
			best = this
		}
	}
	return best
}

// bounds reports whether pl's node policy bounds pod's scores.
func (pl *Placer) bounds(pod *PodRequest) bool {
	return pl.bounder != nil && pl.bounder.bounds(pod)
}

// rate is evaluateFit as a shapeRating.
func (pl *Placer) rate(sc *scratch, s *NodeState, e *memoEntry, pod *PodRequest) shapeRating {
	score, failed := pl.evaluateFit(sc, s, e, pod)
	return shapeRating{shape: e.shape, cpu: s.CPUMilli, mem: s.MemoryMiB, score: score, fits: failed < 0}
}

// shapeProbe is how many nodes Pick rates before judging whether enough
// of them share shapes for the lookup to pay.
const shapeProbe = 64

// shapeRating is Pick's rating of one node shape with its booked CPU and
// memory, which are compared too (the map's key is only a hash of them).
type shapeRating struct {
	shape    unique.Handle[string]
	cpu, mem int64
	score    Score
	fits     bool
}

// shapeKey is the key of s's shape and booked CPU and memory in a map
// of shapeRatings; e is s's memo entry.
func shapeKey(s *NodeState, e *memoEntry) uint64 {
	return shapeKeyOf(e.shapeHash, s.CPUMilli, s.MemoryMiB)
}

// shapeKeyOf is shapeKey of a shape's hash and booked CPU and memory.
func shapeKeyOf(hash uint64, cpu, mem int64) uint64 {
	return hash ^ finalize(uint64(cpu)<<32^uint64(mem))
}

// of reports whether r rates s, whose memo entry is e: the map's key is
// only a hash.
func (r *shapeRating) of(s *NodeState, e *memoEntry) bool {
	return r.rates(e.shape, s.CPUMilli, s.MemoryMiB)
}

// rates reports whether r rates a shape with booked CPU and memory.
func (r *shapeRating) rates(shape unique.Handle[string], cpu, mem int64) bool {
	return r.cpu == cpu && r.mem == mem && r.shape == shape
}

// nameKeyed is implemented by node policies whose rating reads what a
// shapeRater's does and the node's name only as its nameHash, in the low
// nameBits of Secondary (fgd-pack's fixed order of nodes): rated once per
// shape, each node's score takes its own bits (Placer.named).
type nameKeyed interface{ keysName() bool }

// nameBits is how much of Secondary a nameKeyed policy gives the name.
const nameBits = 20

// nameBitsOf is a node's name bits (see nameKeyed).
func nameBitsOf(e *memoEntry) int64 { return hashBits(e.nameHash) }

// hashBits is the name bits of a node whose nameHash is h.
func hashBits(h uint64) int64 { return int64(h >> (64 - nameBits)) }

// named returns score, rated on a node of e's shape, as e's own: with
// e's name bits for a nameKeyed node policy.
func (pl *Placer) named(score Score, e *memoEntry) Score { return pl.namedBy(score, e.nameHash) }

// namedBy is named of the node whose nameHash is h.
func (pl *Placer) namedBy(score Score, h uint64) Score {
	if pl.renames {
		score.Secondary = score.Secondary&^(1<<nameBits-1) | hashBits(h)
	}
	return score
}

func keysName(p any) bool {
	k, ok := p.(nameKeyed)
	return ok && k.keysName()
}

// shapeRater is implemented by policies whose rating of a node reads only
// what shapeOf encodes, the booked CPU and memory, and live samples:
// never a name. ratesShape reports whether that holds.
type shapeRater interface{ ratesShape() bool }

// bounder is implemented by node policies that can bound a node's score
// from its memo entry e, before placing pod (whose demands are ds) on it:
// bound is at least the score of any placement of pod on s. bounds
// reports whether the policy bounds pod's scores at all: Pick rates the
// nodes for a pod it does not bound as for a policy without bounds.
type bounder interface {
	bounds(pod *PodRequest) bool
	bound(s *NodeState, e *memoEntry, pod *PodRequest, ds []demand) Score
}

func ratesShape(p any) bool {
	r, ok := p.(shapeRater)
	return ok && r.ratesShape()
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
