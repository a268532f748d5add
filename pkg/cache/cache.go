package cache

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// Cache holds gpushare nodes and the GPUs pods hold on them. It is safe for
// concurrent use.
type Cache struct {
	logger klog.Logger

	mu    sync.RWMutex
	nodes map[string]*nodeEntry
	// rejected holds why a node seen by the informer takes no part.
	rejected map[string]error
	pods     map[types.UID]*podEntry
	// gpuSizes counts the GPUs of each memory size over the nodes, for
	// LargestGPU.
	gpuSizes map[int64]int
	// now is the clock live samples are judged by.
	now func() time.Time
}

// LiveStaleAfter is how old a node's live GPU sample may be before
// load-aware scoring ignores it and goes by bookings alone.
const LiveStaleAfter = 3 * time.Minute

type nodeEntry struct {
	// inventory is the node as its inventory says; state.Node is a copy
	// in which GPUs under a conflicting booking are marked unhealthy.
	inventory *alloc.Node
	state     *alloc.NodeState
	// liveAt is when state.Live was sampled.
	liveAt time.Time
	// pods holds the pods booked here, so that a new inventory can be
	// rebuilt with their bookings.
	pods map[types.UID]*podEntry
}

type podEntry struct {
	key       string
	placement *alloc.Placement
	// assumed is true between Assume and the informer's delivery of the
	// pod with its record.
	assumed bool
	// record is the annotation value the entry came from, so that an
	// unchanged pod update costs nothing, and alloc its parsed form,
	// checked again against each new inventory of its node.
	record string
	alloc  *gpusharev1.Allocation
	// invalid is set while the record does not match its node's
	// inventory (e.g. names a GPU UUID the node does not have): it books
	// nothing then, exactly as if the node had been seen first.
	invalid bool
	// conflict is set when the booking did not fit the node (its
	// inventory shrank); the GPUs it names are then held full.
	conflict bool
}

// New returns an empty cache.
func New(logger klog.Logger) *Cache {
	return &Cache{
		logger:   logger,
		nodes:    make(map[string]*nodeEntry),
		rejected: make(map[string]error),
		pods:     make(map[types.UID]*podEntry),
		gpuSizes: make(map[int64]int),
		now:      time.Now,
	}
}

// SetNode adds or updates a node. A node that does not opt in, or whose
// inventory is invalid, is dropped and its reason kept for NodeError.
func (c *Cache) SetNode(n *corev1.Node) {
	node, err := NodeFrom(n)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.nodes[n.Name]
	if err != nil {
		if old != nil {
			c.logger.Info("Node leaves gpushare", "node", klog.KObj(n), "reason", err)
		}
		c.dropNode(n.Name)
		c.rejected[n.Name] = err
		// Pods keep their entries: if the node comes back they are
		// booked again.
		return
	}
	delete(c.rejected, n.Name)
	if old != nil && sameInventory(old.inventory, node) {
		old.setLive(c.live(n, node))
		return
	}
	e := &nodeEntry{inventory: node, state: alloc.NewNodeState(copyNode(node)), pods: make(map[types.UID]*podEntry)}
	e.setLive(c.live(n, node))
	c.dropNode(n.Name)
	c.nodes[n.Name] = e
	c.countGPUs(node, 1)
	for uid, p := range c.pods {
		if p.placement.Node != n.Name {
			continue
		}
		if p.alloc != nil {
			// A record is checked against the inventory it will be booked
			// on, whichever the informers delivered first.
			placement, err := PlacementFrom(p.alloc, node)
			if p.invalid = err != nil; p.invalid {
				c.logger.Error(err, "Ignoring the pod's allocation record", "pod", p.key, "node", n.Name)
				continue
			}
			p.placement = placement
		}
		c.book(e, uid, p)
	}
	c.logger.V(2).Info("Node GPU inventory", "node", klog.KObj(n), "gpus", len(node.GPUs), "mode", node.Mode, "pods", len(e.pods))
}

func sameInventory(a, b *alloc.Node) bool {
	if a.Mode != b.Mode || len(a.GPUs) != len(b.GPUs) {
		return false
	}
	for i := range a.GPUs {
		x, y := a.GPUs[i], b.GPUs[i]
		if x.UUID != y.UUID || x.Model != y.Model || x.MemoryMiB != y.MemoryMiB || x.Healthy != y.Healthy ||
			x.NUMANode != y.NUMANode || x.Compute != y.Compute || fmt.Sprint(x.Peers) != fmt.Sprint(y.Peers) {
			return false
		}
	}
	return true
}

// live reads the node's GPUUsage annotation into samples parallel to its
// GPUs, with the sample's time; nil when absent, malformed or stale.
func (c *Cache) live(n *corev1.Node, node *alloc.Node) *liveSample {
	value, ok := n.Annotations[gpusharev1.UsageAnnotation]
	if !ok {
		return nil
	}
	u, err := gpusharev1.ParseUsage(value)
	if err != nil {
		c.logger.V(2).Info("Ignoring the node's GPU usage", "node", klog.KObj(n), "err", err)
		return nil
	}
	if c.now().Sub(u.Time.Time) > LiveStaleAfter {
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

// RemoveNode drops a node; its pods' entries stay until the pods go.
func (c *Cache) RemoveNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropNode(name)
	delete(c.rejected, name)
}

// dropNode removes a node entry and its GPUs from the size counts.
func (c *Cache) dropNode(name string) {
	if e := c.nodes[name]; e != nil {
		c.countGPUs(e.inventory, -1)
		delete(c.nodes, name)
	}
}

func (c *Cache) countGPUs(n *alloc.Node, delta int) {
	for _, g := range n.GPUs {
		if c.gpuSizes[g.MemoryMiB] += delta; c.gpuSizes[g.MemoryMiB] <= 0 {
			delete(c.gpuSizes, g.MemoryMiB)
		}
	}
}

// LargestGPU returns the memory of the largest GPU of any node, in MiB.
func (c *Cache) LargestGPU() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var largest int64
	for size := range c.gpuSizes {
		largest = max(largest, size)
	}
	return largest
}

// book applies p to e. A booking that no longer fits (the node's GPUs
// changed under running pods) is kept as a conflict: its GPUs are marked
// unhealthy in the cache's copy so nothing more lands on them.
func (c *Cache) book(e *nodeEntry, uid types.UID, p *podEntry) {
	e.pods[uid] = p
	p.conflict = false
	if err := e.state.Apply(p.placement); err != nil {
		p.conflict = true
		c.logger.Error(err, "Pod's GPU booking does not fit its node; holding its GPUs", "pod", p.key, "node", e.state.Node.Name)
		// A new Node, not a change in place: the core's memo relies on it.
		n := copyNode(e.state.Node)
		for _, b := range p.placement.Booked {
			if b.GPU >= 0 && b.GPU < len(n.GPUs) {
				n.GPUs[b.GPU].Healthy = false
			}
		}
		e.state.Node = n
	}
}

// placementNode is the node p books on; "" for a nil entry.
func (p *podEntry) placementNode() string {
	if p == nil {
		return ""
	}
	return p.placement.Node
}

func (c *Cache) unbook(uid types.UID, p *podEntry) {
	e := c.nodes[p.placement.Node]
	if e == nil || e.pods[uid] != p {
		return
	}
	delete(e.pods, uid)
	if p.conflict {
		// Rebuild the node from its inventory: the conflict's GPUs may
		// be usable again.
		c.rebuild(e)
		return
	}
	if err := e.state.Release(p.placement); err != nil {
		c.logger.Error(err, "Releasing a pod's GPUs failed; rebuilding the node", "pod", p.key)
		c.rebuild(e)
	}
}

func copyNode(n *alloc.Node) *alloc.Node {
	c := *n
	c.GPUs = append([]alloc.GPU(nil), n.GPUs...)
	return &c
}

func (c *Cache) rebuild(e *nodeEntry) {
	pods, live := e.pods, e.state.Live
	e.state = alloc.NewNodeState(copyNode(e.inventory))
	e.state.Live = live
	e.pods = make(map[types.UID]*podEntry, len(pods))
	for uid, p := range pods {
		c.book(e, uid, p)
	}
}

// Ended reports whether a pod no longer holds its GPUs.
func Ended(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// SetPod adds or updates a pod from the informer. A pod with a valid
// allocation record books it (replacing an assumed placement); a pod that
// ended releases its GPUs; a pod without a record keeps whatever was
// assumed for it.
func (c *Cache) SetPod(pod *corev1.Pod) {
	if Ended(pod) {
		c.RemovePod(pod.UID)
		return
	}
	value, ok := pod.Annotations[gpusharev1.AllocationAnnotation]
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.pods[pod.UID]
	if old != nil && !old.assumed && old.record == value {
		return
	}
	p, err := c.parseRecord(pod, value)
	if err != nil {
		c.logger.Error(err, "Ignoring the pod's allocation record", "pod", klog.KObj(pod))
		return
	}
	if old != nil {
		c.unbook(pod.UID, old)
	}
	c.pods[pod.UID] = p
	if e := c.nodes[p.placement.Node]; e != nil {
		c.book(e, pod.UID, p)
	}
}

func (c *Cache) parseRecord(pod *corev1.Pod, value string) (*podEntry, error) {
	a, err := gpusharev1.ParseAllocation(value)
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != a.Node {
		return nil, fmt.Errorf("pod is bound to node %s but its allocation is for node %s", pod.Spec.NodeName, a.Node)
	}
	// A node not known yet: keep the record and book it when the node
	// arrives; SetNode checks it against the inventory then.
	var node *alloc.Node
	if e := c.nodes[a.Node]; e != nil {
		node = e.inventory
	}
	p, err := PlacementFrom(a, node)
	if err != nil {
		return nil, err
	}
	return &podEntry{key: pod.Namespace + "/" + pod.Name, placement: p, record: value, alloc: a}, nil
}

// RemovePod releases whatever a pod held or was assumed to hold.
func (c *Cache) RemovePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pods[uid]; p != nil {
		c.unbook(uid, p)
		delete(c.pods, uid)
	}
}

// ErrNodeGone is returned by Assume for a node the cache does not hold.
var ErrNodeGone = errors.New("node is not a gpushare node")

// Assume books a placement for a pod that is about to be recorded and
// bound, replacing anything the pod held. It fails if the node is gone or
// the placement no longer fits.
func (c *Cache) Assume(uid types.UID, key string, p *alloc.Placement) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.assumeLocked(uid, key, p)
}

func (c *Cache) assumeLocked(uid types.UID, key string, p *alloc.Placement) error {
	e := c.nodes[p.Node]
	if e == nil {
		return fmt.Errorf("%w: %s", ErrNodeGone, p.Node)
	}
	old := c.pods[uid]
	if old != nil {
		c.unbook(uid, old)
	}
	entry := &podEntry{key: key, placement: p, assumed: true}
	if err := e.state.Apply(p); err != nil {
		// Book the old placement again, on its own node.
		if oe := c.nodes[old.placementNode()]; oe != nil && !old.invalid {
			c.book(oe, uid, old)
		}
		return err
	}
	e.pods[uid] = entry
	c.pods[uid] = entry
	return nil
}

// PlaceAndAssume places pod on the named node with placer, against the
// node's current bookings, and assumes the result, all under one lock, so
// that concurrent callers never book the same share twice.
func (c *Cache) PlaceAndAssume(uid types.UID, placer *alloc.Placer, node string, pod *alloc.PodRequest) (*alloc.Placement, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.nodes[node]
	if e == nil {
		return nil, fmt.Errorf("%w: %s", ErrNodeGone, node)
	}
	state := e.state
	if old := c.pods[uid]; old != nil && old.placement.Node == node {
		// Rating the node as if the pod's old booking were gone.
		state = state.Clone()
		_ = state.Release(old.placement)
	}
	p, unfit := placer.Place(state, pod)
	if unfit != nil {
		return nil, unfit
	}
	if err := c.assumeLocked(uid, pod.Key, p); err != nil {
		return nil, err
	}
	return p, nil
}

// Forget drops an assumed placement (the pod was not bound after all). A
// recorded placement stays: the record on the pod is the truth.
func (c *Cache) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pods[uid]; p != nil && p.assumed {
		c.unbook(uid, p)
		delete(c.pods, uid)
	}
}

// Read calls fn with the node's state under the read lock, or returns why
// the node takes no part. fn must not keep or change the state.
func (c *Cache) Read(node string, fn func(*alloc.NodeState)) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.nodes[node]
	if e == nil {
		return c.nodeErrorLocked(node)
	}
	fn(e.state)
	return nil
}

// ReadEach calls fn with the state of each named node, or why the node is
// not in the cache, under one read lock: rating many nodes for one request
// takes the lock once. fn must not keep the state or call the Cache.
func (c *Cache) ReadEach(names []string, fn func(name string, s *alloc.NodeState, err error)) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, name := range names {
		if e := c.nodes[name]; e != nil {
			fn(name, e.state, nil)
		} else {
			fn(name, nil, c.nodeErrorLocked(name))
		}
	}
}

// NodeError says why a node is not in the cache, nil if it is.
func (c *Cache) NodeError(node string) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.nodes[node] != nil {
		return nil
	}
	return c.nodeErrorLocked(node)
}

func (c *Cache) nodeErrorLocked(node string) error {
	if err := c.rejected[node]; err != nil {
		return err
	}
	return fmt.Errorf("%w: %s", ErrNodeGone, node)
}

// Snapshot returns copies of every node's state, sorted by name.
func (c *Cache) Snapshot() []*alloc.NodeState {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*alloc.NodeState, 0, len(c.nodes))
	for _, e := range c.nodes {
		s := e.state.Clone()
		s.Node = copyNode(s.Node)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node.Name < out[j].Node.Name })
	return out
}

// Holding returns the placement the cache books for a pod, and whether it
// is only assumed; nil if the pod holds nothing.
func (c *Cache) Holding(uid types.UID) (p *alloc.Placement, assumed bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e := c.pods[uid]; e != nil {
		return e.placement, e.assumed
	}
	return nil, false
}
