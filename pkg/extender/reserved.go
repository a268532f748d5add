package extender

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
)

// ReservationTTL is how long a placement filter assumed for a pod waits
// for the pod's bind call. kube-scheduler binds moments after the filter
// call; a bind that comes later places the pod again, as one that comes
// without a reservation does.
const ReservationTTL = 30 * time.Second

// reservations are the placements filter assumed in the cache for the
// pods it passed on one node alone. kube-scheduler binds asynchronously:
// it filters the next pods before the bind call of this one arrives, and
// without a reservation the extender would rate them against GPUs this
// pod is about to take, pass the same node, and fail their binds. Bind
// takes a pod's reservation over; a new filter call for the pod drops
// it; one that nothing takes within ttl is forgotten.
type reservations struct {
	mu  sync.Mutex
	ttl time.Duration
	now func() time.Time
	at  map[types.UID]time.Time
	// order holds the reservations made, oldest first; an item whose
	// time is no longer at's for its pod was taken or replaced.
	order []reservedAt
}

type reservedAt struct {
	pod types.UID
	at  time.Time
}

func (r *reservations) initLocked() {
	if r.at != nil {
		return
	}
	r.at = map[types.UID]time.Time{}
	if r.ttl <= 0 {
		r.ttl = ReservationTTL
	}
	if r.now == nil {
		r.now = time.Now
	}
}

// reserve places pod on node with placer and assumes the placement in c,
// in place of what an earlier filter call reserved for the pod.
func (r *reservations) reserve(c *gpucache.Cache, uid types.UID, placer *alloc.Placer, node string, pod *alloc.PodRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	now := r.now()
	r.dropLocked(c, uid)
	if _, err := c.PlaceAndAssume(uid, placer, node, pod); err != nil {
		return err
	}
	r.at[uid] = now
	r.order = append(r.order, reservedAt{pod: uid, at: now})
	return nil
}

// drop forgets pod's reservation, if it holds one, before a new filter
// call rates the nodes without it, and any reservation past its ttl.
func (r *reservations) drop(c *gpucache.Cache, uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	r.expireLocked(c, r.now())
	r.dropLocked(c, uid)
}

func (r *reservations) dropLocked(c *gpucache.Cache, uid types.UID) {
	if _, ok := r.at[uid]; ok {
		delete(r.at, uid)
		c.Forget(uid)
	}
}

// take hands pod's reservation to its bind, which places the pod again
// on the node it binds to (the reservation is then replaced) and forgets
// the placement if it fails: expiry no longer touches it. It reports
// whether the pod held one.
func (r *reservations) take(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	_, ok := r.at[uid]
	delete(r.at, uid)
	return ok
}

// expire forgets the reservations past their ttl.
func (r *reservations) expire(c *gpucache.Cache) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	r.expireLocked(c, r.now())
}

// expireLocked forgets, under r.mu (so that no bind takes one meanwhile),
// the reservations made before now less the ttl.
func (r *reservations) expireLocked(c *gpucache.Cache, now time.Time) {
	n := 0
	for _, o := range r.order {
		if now.Sub(o.at) <= r.ttl {
			break
		}
		n++
		if at, ok := r.at[o.pod]; ok && at.Equal(o.at) {
			delete(r.at, o.pod)
			c.Forget(o.pod)
		}
	}
	r.order = r.order[n:]
}
