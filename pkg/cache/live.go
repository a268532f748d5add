package cache

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// nodeUsage parses the GPUUsage annotation on the Node; nil when absent
// or malformed.
func (c *Cache) nodeUsage(n *corev1.Node) *gpusharev1.GPUUsage {
	value, ok := n.Annotations[gpusharev1.UsageAnnotation]
	if !ok {
		return nil
	}
	u, err := gpusharev1.ParseUsage(value)
	if err != nil {
		c.logger.V(2).Info("Ignoring the node's GPU usage", "node", klog.KObj(n), "err", err)
		return nil
	}
	return u
}

// SetLive records the live use node's daemon published on its lease (nil:
// none). It is the node's live use from then on unless the Node's own
// annotation holds a newer sample (a daemon that predates the lease's
// use, in a mixed cluster).
func (c *Cache) SetLive(node string, u *gpusharev1.GPUUsage) {
	c.daemons.setLive(node, u)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.nodes[node]; e != nil {
		c.applyLive(node, e)
	}
}

// applyLive sets e's live use from the newer of its lease's sample and
// its Node's. c.mu must be held.
func (c *Cache) applyLive(node string, e *nodeEntry) {
	u := c.daemons.liveOf(node)
	if n := e.nodeUsage; n != nil && (u == nil || n.Time.After(u.Time.Time)) {
		u = n
	}
	e.setLive(c.live(u, e.inventory))
}

// live reads u into samples parallel to the node's GPUs, with the
// sample's time; nil when u is nil or stale.
func (c *Cache) live(u *gpusharev1.GPUUsage, node *alloc.Node) *liveSample {
	if u == nil || c.now().Sub(u.Time.Time) > LiveStaleAfter {
		return nil
	}
	live := make([]alloc.Live, len(node.GPUs))
	for _, g := range u.GPUs {
		if g.Index < len(live) {
			live[g.Index] = alloc.Live{Valid: true, MemoryMiB: g.UsedMemoryMiB, Utilization: g.UtilizationPercent}
		}
	}
	return &liveSample{at: u.Time.Time, gpus: live}
}

// liveSample is a node's live GPU use at a time.
type liveSample struct {
	at   time.Time
	gpus []alloc.Live
}

func (e *nodeEntry) setLive(l *liveSample) {
	e.liveAt = time.Time{}
	e.state.Live = nil
	if l != nil {
		e.liveAt, e.state.Live = l.at, l.gpus
	}
	e.resum()
}

// ExpireLive drops live samples older than LiveStaleAfter, so that a node
// whose daemon stopped reporting is scored by its bookings. Call it
// periodically.
func (c *Cache) ExpireLive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, e := range c.nodes {
		if e.state.Live != nil && c.now().Sub(e.liveAt) > LiveStaleAfter {
			c.logger.V(2).Info("Live GPU usage is stale; scoring by bookings", "node", name, "sampled", e.liveAt)
			e.setLive(nil)
		}
	}
}

// ErrDaemonDown is returned by Read and ReadEach for a node whose daemon
// let its lease expire: it may not serve containers their GPUs.
var ErrDaemonDown = errors.New("gpushare-node on the node stopped renewing its lease")

// SetLease records until when node's daemon holds its lease, and reports
// whether that brings back a daemon whose lease had expired. A node
// without a lease is not judged by one (its daemon may predate leases).
// It takes only the daemons' lock: the bookings never wait for a renewal.
func (c *Cache) SetLease(node string, expires time.Time) (recovered bool) {
	return c.daemons.renew(node, expires, c.now())
}

// RemoveLease forgets node's lease, and the live use it carried.
func (c *Cache) RemoveLease(node string) {
	if !c.daemons.forget(node) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.nodes[node]; e != nil {
		c.applyLive(node, e)
	}
}

// daemons is a side store of the cache: what each node's daemon says
// through its lease, until when it holds the lease and the live use it
// carries. A renewal, thousands a minute in a large cluster, neither
// waits for the bookings' lock nor holds it; Filter reads the expiries of
// every node it tries without taking a lock (sync.Map), and the samples
// have a small lock of their own, taken after Cache.mu when both are.
type daemons struct {
	// expires holds, per node, until when its daemon holds its lease
	// (time.Time), and leases how many nodes have one.
	expires sync.Map
	leases  atomic.Int64

	mu      sync.Mutex
	samples map[string]*gpusharev1.GPUUsage
}

func newDaemons() *daemons {
	return &daemons{samples: map[string]*gpusharev1.GPUUsage{}}
}

// renew records node's lease until expires and reports whether it had
// expired by now.
func (d *daemons) renew(node string, expires, now time.Time) (recovered bool) {
	old, had := d.expires.Swap(node, expires)
	if !had {
		d.leases.Add(1)
		return false
	}
	return now.After(old.(time.Time)) && !now.After(expires)
}

// forget drops node's lease and reports whether it carried live use.
func (d *daemons) forget(node string) (hadLive bool) {
	if _, had := d.expires.LoadAndDelete(node); had {
		d.leases.Add(-1)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, hadLive = d.samples[node]
	delete(d.samples, node)
	return hadLive
}

func (d *daemons) setLive(node string, u *gpusharev1.GPUUsage) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if u == nil {
		delete(d.samples, node)
	} else {
		d.samples[node] = u
	}
}

func (d *daemons) liveOf(node string) *gpusharev1.GPUUsage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.samples[node]
}

// any reports whether some node's daemon holds a lease: ReadEach reads
// the clock only then.
func (d *daemons) any() bool { return d.leases.Load() > 0 }

// down says whether node's daemon let its lease expire by now. The
// clock is read only for a node with a lease: Filter reads every node it
// tries.
func (d *daemons) down(node string, now func() time.Time) error {
	v, ok := d.expires.Load(node)
	if !ok {
		return nil
	}
	if expires := v.(time.Time); now().After(expires) {
		return fmt.Errorf("%w (it expired at %s): %s", ErrDaemonDown, expires.UTC().Format(time.RFC3339), node)
	}
	return nil
}
