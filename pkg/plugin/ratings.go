package plugin

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// ratings collects what Filter rates, from kube-scheduler's 16 parallel
// Filter goroutines, without a lock: each rating takes the next of a
// fixed number of slots, and only those past them go to a locked map.
// A lock and a shared map cost Filter more than rating a node did.
// NormalizeScore reads them once every Filter call has returned; a clone
// (kube-scheduler clones the state inside a Filter goroutine when
// nominated pods may run on its node) takes the slots already written.
type ratings struct {
	slots []ratedNode
	// n counts the slots taken, some maybe past len(slots).
	n atomic.Int64

	mu   sync.Mutex
	more map[string]alloc.Rating
}

type ratedNode struct {
	node   string
	rating alloc.Rating
	// written is set once node and rating are.
	written atomic.Bool
}

// slotsPool holds the slots of cycles done with them (release): a
// cycle's slots were an eighth of what it allocated (BenchmarkCycle).
var slotsPool sync.Pool

func newRatings(size int) *ratings {
	if s, ok := slotsPool.Get().(*[]ratedNode); ok && cap(*s) >= size {
		slots := (*s)[:size]
		clear(slots)
		return &ratings{slots: slots}
	}
	return &ratings{slots: make([]ratedNode, size)}
}

// release gives the slots to the next cycle: call it once every put has
// returned and nothing reads r again.
func (r *ratings) release() {
	s := r.slots
	r.slots = nil
	r.n.Store(0)
	slotsPool.Put(&s)
}

// put records node's rating; safe for concurrent use.
func (r *ratings) put(node string, rating alloc.Rating) {
	if i := r.n.Add(1) - 1; i < int64(len(r.slots)) {
		s := &r.slots[i]
		s.node, s.rating = node, rating
		s.written.Store(true)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.more == nil {
		r.more = map[string]alloc.Rating{}
	}
	r.more[node] = rating
}

// byNodePool holds the maps byNode fills, each used for one
// NormalizeScore: a fresh map of hundreds of nodes for every pod was a
// tenth of what gpushare-scheduler allocated.
var byNodePool = sync.Pool{New: func() any { return map[string]alloc.Rating{} }}

// byNode returns every rating by node, the latest of a node rated twice,
// in a map from byNodePool: put it back when done.
func (r *ratings) byNode() map[string]alloc.Rating {
	n := int(min(r.n.Load(), int64(len(r.slots))))
	r.mu.Lock()
	defer r.mu.Unlock()
	out := byNodePool.Get().(map[string]alloc.Rating)
	clear(out)
	for i := range r.slots[:n] {
		if s := &r.slots[i]; s.written.Load() {
			out[s.node] = s.rating
		}
	}
	maps.Copy(out, r.more)
	return out
}

// clone returns a copy of the ratings written so far.
func (r *ratings) clone() *ratings {
	out := &ratings{slots: make([]ratedNode, len(r.slots))}
	k := 0
	for i := range r.slots[:min(r.n.Load(), int64(len(r.slots)))] {
		if s := &r.slots[i]; s.written.Load() {
			c := &out.slots[k]
			c.node, c.rating = s.node, s.rating
			c.written.Store(true)
			k++
		}
	}
	out.n.Store(int64(k))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.more != nil {
		out.more = maps.Clone(r.more)
	}
	return out
}
