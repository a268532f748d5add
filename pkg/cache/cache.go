package cache

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// Cache holds gpushare nodes and the GPUs pods hold on them. It is safe for
// concurrent use.
//
// A pod's allocation record books its GPUs only once the pod is bound to
// the node the record names, and only if the record gives each container
// what its spec asks (alloc.Conform): a record written by anyone but the
// scheduler that bound the pod books nothing. The spec it is checked
// against is the pod's as the record says it was when bound (its
// request-shaping annotations, gpusharev1.Asked): edits of the pod after
// binding are reported, and never free the GPUs the record holds. A
// booked record is not changed by later edits of the annotation. Bookings are held by GPU UUID:
// a GPU that leaves the node's inventory keeps its bookings, unhealthy,
// until their pods end.
type Cache struct {
	logger klog.Logger
	opts   Options

	mu    sync.RWMutex
	nodes map[string]*nodeEntry
	// rejected holds why a node seen by the informer takes no part.
	rejected map[string]error
	pods     map[types.UID]*podEntry
	// refused holds, per pod, the record value the cache refused, so that
	// each is reported once.
	refused map[types.UID]string
	// unrecorded holds the bound pods on gpushare nodes that carry no
	// record, each checked once: whether it asks for GPUs.
	unrecorded map[types.UID]bool
	// gpuSizes counts the GPUs of each memory size over the nodes, for
	// LargestGPU.
	gpuSizes map[int64]int
	// supply counts the healthy GPUs of each kind (model and memory), for
	// Supply; supplyGen counts its changes.
	supply    map[alloc.Supply]int64
	supplyGen atomic.Uint64
	// leases holds, per node, when its daemon's lease expires.
	leases map[string]time.Time
	// leaseLive holds, per node, the live use its daemon's lease
	// carries (SetLive).
	leaseLive map[string]*gpusharev1.GPUUsage
	// now is the clock live samples are judged by.
	now func() time.Time
	// bound holds the CPU and memory of each bound pod that has not
	// ended (Options.Resources), and requested their sum per node: what
	// kube-scheduler counts against the node's allocatable.
	bound     map[types.UID]podResources
	requested map[string]podResources
}

// podResources is a pod's CPU and memory request on a node.
type podResources struct {
	node          string
	cpu, memoryMi int64
}

// Options are the cache's dependencies on the adapter that feeds it.
type Options struct {
	// Requests translates a pod's spec into what it asks of GPUs, the
	// measure its record is checked against. Nil checks a record's
	// shape against its node only.
	Requests func(*corev1.Pod) (*alloc.PodRequest, error)
	// Resources, if set, gives a pod's CPU (milli) and memory (MiB)
	// request: the cache then counts every bound pod's against its node,
	// so that a node's state shows the CPU and memory left, which
	// fragmentation-aware policies weigh. Nil counts none.
	Resources func(*corev1.Pod) (cpuMilli, memoryMiB int64)
	// Refused, if set, is told once per record value that the cache does
	// not book, with why (the adapter emits an event on the pod), and
	// once per change of a booked pod's request-shaping annotations, with
	// an error that is ErrRequestEdited.
	Refused func(pod *corev1.Pod, err error)
	// RequestAnnotations, if set, gives the annotations that shape a
	// pod's request (resource.Model.RequestAnnotations): a record that
	// keeps their values at binding (gpusharev1.Asked) is checked against
	// the pod with those values. Nil checks every record against the pod
	// as it is.
	RequestAnnotations func(*corev1.Pod) []string
}

// LiveStaleAfter is how old a node's live GPU sample may be before
// load-aware scoring ignores it and goes by bookings alone.
const LiveStaleAfter = 3 * time.Minute

type nodeEntry struct {
	// inventory is the node as its inventory says; state.Node is a copy
	// with a GPU appended, unhealthy, for each UUID that a booked record
	// holds and the inventory no longer lists, and with GPUs under a
	// conflicting booking marked unhealthy.
	inventory *alloc.Node
	state     *alloc.NodeState
	// liveAt is when state.Live was sampled.
	liveAt time.Time
	// nodeUsage is the live use the Node's own annotation holds, parsed:
	// what daemons before the use moved to the lease write, kept as the
	// fallback of a node whose lease carries none.
	nodeUsage *gpusharev1.GPUUsage
	// pods holds every entry on this node, booked or not, so that a new
	// inventory can be rebuilt with their bookings.
	pods map[types.UID]*podEntry
	// over is, per GPU of state.Node, what conflicting bookings hold
	// beyond state.GPUs: the metrics show it, so that an over-commit is
	// never hidden.
	over []alloc.Usage
}

type podEntry struct {
	key       string
	node      string
	placement *alloc.Placement
	// assumed is true between Assume and the informer's delivery of the
	// pod with its record.
	assumed bool
	// record is the annotation value the entry came from, so that an
	// unchanged pod update costs nothing, alloc its parsed form and req
	// what the pod asks (nil without Options.Requests): the record is
	// checked against both on each inventory of its node.
	record string
	alloc  *gpusharev1.Allocation
	req    *alloc.PodRequest
	// pod is kept for reports about the record.
	pod *corev1.Pod
	// invalid is set while the record does not fit its node's inventory
	// or the pod's request: it books nothing then.
	invalid bool
	// conflict is set when the booking did not fit the node (its
	// inventory shrank, or a record over-commits); the GPUs it names are
	// then held full.
	conflict bool
	// foreign is set when the record is another system's (ForeignAllocation):
	// alloc names its GPUs by index, placed on the node's at each booking.
	foreign bool
	// edited lists the request-shaping annotations that changed since
	// the pod was bound: the record still books what it names.
	edited []string
}

// New returns an empty cache.
func New(logger klog.Logger, o Options) *Cache {
	return &Cache{
		logger:     logger,
		opts:       o,
		nodes:      make(map[string]*nodeEntry),
		rejected:   make(map[string]error),
		pods:       make(map[types.UID]*podEntry),
		refused:    make(map[types.UID]string),
		unrecorded: make(map[types.UID]bool),
		gpuSizes:   make(map[int64]int),
		supply:     make(map[alloc.Supply]int64),
		leases:     make(map[string]time.Time),
		leaseLive:  make(map[string]*gpusharev1.GPUUsage),
		now:        time.Now,
		bound:      make(map[types.UID]podResources),
		requested:  make(map[string]podResources),
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
			c.logger.Error(err, "Node leaves gpushare; its pods' bookings are kept until it returns", "node", klog.KObj(n))
		}
		c.dropNode(n.Name)
		c.rejected[n.Name] = err
		// Pods keep their entries: if the node comes back they are
		// booked again.
		return
	}
	delete(c.rejected, n.Name)
	if old != nil && sameInventory(old.inventory, node) {
		old.nodeUsage = c.nodeUsage(n)
		c.applyLive(n.Name, old)
		return
	}
	e := &nodeEntry{inventory: node, pods: make(map[types.UID]*podEntry), nodeUsage: c.nodeUsage(n)}
	c.dropNode(n.Name)
	c.nodes[n.Name] = e
	c.countGPUs(node, 1)
	for uid, p := range c.pods {
		if p.node == n.Name {
			e.pods[uid] = p
		}
	}
	c.rebuild(e)
	c.applyLive(n.Name, e)
	c.logger.V(2).Info("Node GPU inventory", "node", klog.KObj(n), "gpus", len(node.GPUs), "mode", node.Mode, "pods", len(e.pods))
}

func sameInventory(a, b *alloc.Node) bool {
	if a.Mode != b.Mode || len(a.GPUs) != len(b.GPUs) || a.CPUMilli != b.CPUMilli || a.MemoryMiB != b.MemoryMiB {
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if u == nil {
		delete(c.leaseLive, node)
	} else {
		c.leaseLive[node] = u
	}
	if e := c.nodes[node]; e != nil {
		c.applyLive(node, e)
	}
}

// applyLive sets e's live use from the newer of its lease's sample and
// its Node's.
func (c *Cache) applyLive(node string, e *nodeEntry) {
	u := c.leaseLive[node]
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
		if !g.Healthy {
			continue
		}
		kind := alloc.Supply{Model: g.Model, MemoryMiB: g.MemoryMiB}
		if c.supply[kind] += int64(delta); c.supply[kind] <= 0 {
			delete(c.supply, kind)
		}
		c.supplyGen.Add(1)
	}
}

// Supply returns the nodes' healthy GPUs per kind, sorted by
// alloc.CompareSupply, and a generation that changes when they do.
func (c *Cache) Supply() ([]alloc.Supply, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]alloc.Supply, 0, len(c.supply))
	for kind, n := range c.supply {
		kind.GPUs = n
		out = append(out, kind)
	}
	slices.SortFunc(out, alloc.CompareSupply)
	return out, c.supplyGen.Load()
}

// SupplyGeneration returns Supply's generation alone, without a lock.
func (c *Cache) SupplyGeneration() uint64 { return c.supplyGen.Load() }

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

// rebuild books every entry of e again on a fresh state of its inventory,
// with the GPUs its records hold that the inventory no longer lists.
func (c *Cache) rebuild(e *nodeEntry) {
	var live []alloc.Live
	if e.state != nil {
		live = e.state.Live
	}
	// In a fixed order, so that which of two conflicting bookings comes
	// first does not depend on map order: the older pod's.
	pods := sortedEntries(e.pods)
	node := withVanished(e.inventory, pods)
	e.state = alloc.NewNodeState(node)
	r := c.requested[node.Name]
	e.state.CPUMilli, e.state.MemoryMiB = r.cpu, r.memoryMi
	// Live samples are by inventory index; vanished GPUs have none.
	e.state.Live = live
	e.over = make([]alloc.Usage, len(node.GPUs))
	for _, p := range pods {
		c.book(e, p)
	}
}

// VanishedModel is the model a GPU gets in the cache when the node's
// inventory no longer lists a GPU that a record holds.
const VanishedModel = "vanished"

// withVanished returns a copy of inv with one unhealthy GPU appended for
// each UUID that a record of pods names and inv does not list, sized to
// hold every record's share of it.
func withVanished(inv *alloc.Node, pods []*podEntry) *alloc.Node {
	n := copyNode(inv)
	index := uuidIndex(inv)
	for _, p := range pods {
		if p.alloc == nil || p.foreign {
			continue
		}
		for _, ca := range p.alloc.Containers {
			for _, g := range ca.GPUs {
				i, ok := index[g.UUID]
				if !ok {
					i = len(n.GPUs)
					index[g.UUID] = i
					n.GPUs = append(n.GPUs, alloc.GPU{Index: i, UUID: g.UUID, Model: VanishedModel, NUMANode: -1})
				}
				if i >= len(inv.GPUs) {
					v := &n.GPUs[i]
					v.MemoryMiB += g.MemoryMiB
					v.Compute = max(v.Compute, alloc.FullCompute) + g.Compute
				}
			}
		}
	}
	return n
}

func uuidIndex(n *alloc.Node) map[string]int {
	index := make(map[string]int, len(n.GPUs))
	for i, g := range n.GPUs {
		index[g.UUID] = i
	}
	return index
}

// sortedEntries returns the entries oldest record first (then by key).
func sortedEntries(pods map[types.UID]*podEntry) []*podEntry {
	out := make([]*podEntry, 0, len(pods))
	for _, p := range pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.pod != nil && b.pod != nil && !a.pod.CreationTimestamp.Equal(&b.pod.CreationTimestamp) {
			return a.pod.CreationTimestamp.Before(&b.pod.CreationTimestamp)
		}
		return a.key < b.key
	})
	return out
}

// book applies entry p to e. A record is first placed on e's GPUs by UUID
// and checked against the pod's request; one that fails is kept invalid
// and books nothing. A booking that no longer fits (the node's GPUs
// changed under running pods, or records over-commit a GPU) is kept as a
// conflict: its GPUs are marked unhealthy in the cache's copy so nothing
// more lands on them, and what it holds is shown in e.over.
func (c *Cache) book(e *nodeEntry, p *podEntry) {
	p.invalid, p.conflict = false, false
	if p.alloc != nil {
		a, err := p.alloc, error(nil)
		if p.foreign {
			a, err = ByIndex(a, p.req, func(i int) (alloc.GPU, bool) {
				if i < 0 || i >= len(e.inventory.GPUs) {
					return alloc.GPU{}, false
				}
				return e.inventory.GPUs[i], true
			})
			if err != nil {
				err = fmt.Errorf("%w: %w", Foreign(p.pod), err)
			}
		}
		var placement *alloc.Placement
		if err == nil {
			placement, err = placeRecord(a, e.state.Node)
		}
		if err == nil && p.req != nil {
			err = alloc.Conform(placement, p.req, e.inventory)
		}
		if err != nil {
			p.invalid = true
			c.report(p.pod, p.key, p.record, err)
			return
		}
		p.placement = placement
		if p.pod != nil && !p.foreign {
			delete(c.refused, p.pod.UID)
		}
	}
	err := e.state.Apply(p.placement)
	if err == nil && p.foreign && p.pod != nil {
		delete(c.refused, p.pod.UID)
	}
	if err != nil {
		p.conflict = true
		c.logger.Error(err, "Pod's GPU booking does not fit its node; holding its GPUs", "pod", p.key, "node", e.state.Node.Name)
		if p.foreign {
			// gpushare placed nothing here: say so on the pod.
			c.report(p.pod, p.key, p.record, fmt.Errorf("%w over-commits its GPU; holding it full: %w", Foreign(p.pod), err))
		}
		// A new Node, not a change in place: the core's memo relies on it.
		n := copyNode(e.state.Node)
		for _, b := range p.placement.Booked {
			if b.GPU >= 0 && b.GPU < len(n.GPUs) {
				n.GPUs[b.GPU].Healthy = false
				o := &e.over[b.GPU]
				o.MemoryMiB += b.MemoryMiB
				o.Compute += b.Compute
			}
		}
		e.state.Node = n
	}
}

// placeRecord turns a record into a placement on node's GPUs, each named
// by its UUID: the index a record gives is where the GPU was when it was
// written, and a driver may renumber GPUs.
func placeRecord(a *gpusharev1.Allocation, node *alloc.Node) (*alloc.Placement, error) {
	p, err := PlacementFrom(a, nil)
	if err != nil {
		return nil, err
	}
	if a.Node != node.Name {
		return nil, fmt.Errorf("allocation is for node %s, not %s", a.Node, node.Name)
	}
	index := uuidIndex(node)
	for ci := range p.Containers {
		gpus := p.Containers[ci].GPUs
		for k := range gpus {
			i, ok := index[gpus[k].UUID]
			if !ok {
				return nil, fmt.Errorf("container %s: node %s has no GPU with UUID %s", p.Containers[ci].Name, node.Name, gpus[k].UUID)
			}
			gpus[k].GPU = i
		}
	}
	p.Booked = alloc.Booking(p.Containers)
	return p, nil
}

// report logs, once per record value, why a pod's record books nothing,
// and tells Options.Refused.
func (c *Cache) report(pod *corev1.Pod, key, record string, err error) {
	if pod != nil {
		if r, ok := c.refused[pod.UID]; ok && r == record {
			return
		}
		c.refused[pod.UID] = record
	}
	c.logger.Error(err, "Ignoring the pod's allocation record", "pod", key)
	if c.opts.Refused != nil && pod != nil {
		c.opts.Refused(pod, err)
	}
}

func (c *Cache) unbook(uid types.UID, p *podEntry) {
	e := c.nodes[p.node]
	if e == nil || e.pods[uid] != p {
		return
	}
	delete(e.pods, uid)
	if p.invalid {
		return
	}
	if p.conflict {
		// Rebuild the node from its inventory: the conflict's GPUs may
		// be usable again.
		c.rebuild(e)
		return
	}
	if err := e.state.Release(p.placement); err != nil {
		c.logger.Error(err, "Releasing a pod's GPUs failed; rebuilding the node", "pod", p.key)
		c.rebuild(e)
		return
	}
	if len(e.state.Node.GPUs) > len(e.inventory.GPUs) {
		// The pod may have been the last to hold a vanished GPU.
		c.rebuild(e)
	}
}

func copyNode(n *alloc.Node) *alloc.Node {
	c := *n
	c.GPUs = append([]alloc.GPU(nil), n.GPUs...)
	return &c
}

// Ended reports whether a pod no longer holds its GPUs.
func Ended(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// SetPod adds or updates a pod from the informer. A bound pod with a
// valid allocation record for its node books it (replacing an assumed
// placement); a pod that ended releases its GPUs; a pod without a record
// keeps whatever was assumed for it. A record on a pod that is not bound,
// or that is not what the pod asks for, books nothing and is reported;
// once booked, a record is not changed by edits of the annotation.
func (c *Cache) SetPod(pod *corev1.Pod) {
	if Ended(pod) {
		c.RemovePod(pod.UID)
		return
	}
	if c.opts.Resources != nil && pod.Spec.NodeName != "" {
		// Most updates are of pods counted already (status changes):
		// those take only the read lock.
		c.mu.RLock()
		_, counted := c.bound[pod.UID]
		c.mu.RUnlock()
		if !counted {
			c.mu.Lock()
			c.countLocked(pod)
			c.mu.Unlock()
		}
	}
	value, ok := pod.Annotations[gpusharev1.AllocationAnnotation]
	foreign := false
	if !ok {
		// gpushare's record first; else one another system left.
		if value, foreign = foreignValue(pod); !foreign {
			c.noteUnrecorded(pod)
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.pods[pod.UID]
	if old != nil && !old.assumed && old.record == value {
		c.noteEdits(pod, old)
		return
	}
	key := pod.Namespace + "/" + pod.Name
	p, err := c.parseRecord(pod, value, foreign)
	if err != nil {
		c.report(pod, key, value, err)
		return
	}
	if old != nil && !old.assumed && !old.invalid {
		if equalRecords(old.alloc, p.alloc) {
			old.record = value
			c.noteEdits(pod, old)
			return
		}
		c.report(pod, key, value, fmt.Errorf("%w; keeping the booking of the record it was bound with", ErrRecordChanged))
		return
	}
	if old != nil {
		c.unbook(pod.UID, old)
	}
	delete(c.refused, pod.UID)
	c.pods[pod.UID] = p
	if e := c.nodes[p.node]; e != nil {
		e.pods[pod.UID] = p
		if !p.foreign && needsRebuild(e, p.alloc) {
			c.rebuild(e)
		} else {
			c.book(e, p)
		}
	}
	c.noteEdits(pod, p)
}

// noteEdits reports, once per change, that a booked pod's request-shaping
// annotations are no longer those its record was made for. The record
// keeps booking its GPUs: the pod's containers run with them.
func (c *Cache) noteEdits(pod *corev1.Pod, p *podEntry) {
	if p.alloc == nil || p.alloc.Asked == nil || c.opts.RequestAnnotations == nil || p.invalid {
		return
	}
	edited := p.alloc.Asked.Edited(pod.Annotations, c.opts.RequestAnnotations(pod))
	if slices.Equal(edited, p.edited) {
		return
	}
	p.edited, p.pod = edited, pod
	if len(edited) == 0 {
		return
	}
	err := fmt.Errorf("%w: %s; the record keeps booking the GPUs it names, and the node daemon serves its containers no more",
		ErrRequestEdited, strings.Join(edited, ", "))
	c.logger.Error(err, "Pod's GPU request was edited after binding", "pod", p.key)
	if c.opts.Refused != nil {
		c.opts.Refused(pod, err)
	}
}

// noteUnrecorded reports, once per pod, a pod bound to a gpushare node
// that asks for GPUs and carries no record: it was bound without
// gpushare (spec.nodeName set by hand, or another scheduler), so it books
// no GPU and the node daemon gives its containers none.
func (c *Cache) noteUnrecorded(pod *corev1.Pod) {
	if pod.Spec.NodeName == "" || c.opts.Requests == nil {
		return
	}
	c.mu.RLock()
	_, seen := c.unrecorded[pod.UID]
	_, gpushare := c.nodes[pod.Spec.NodeName]
	// A pod the scheduler assumed gets its record from it: a binder
	// other than gpushare's may have bound it first.
	_, assumed := c.pods[pod.UID]
	c.mu.RUnlock()
	if seen || !gpushare || assumed {
		return
	}
	req, err := c.opts.Requests(pod)
	asks := err == nil && req.GPUs()
	c.mu.Lock()
	if _, seen := c.unrecorded[pod.UID]; seen {
		c.mu.Unlock()
		return
	}
	c.unrecorded[pod.UID] = asks
	c.mu.Unlock()
	if !asks {
		return
	}
	err = fmt.Errorf("%w: bound to node %s without gpushare's %s record (spec.nodeName set directly, or another scheduler bound it): "+
		"gpushare books no GPU for it and gpushare-node gives its containers none; recreate it without spec.nodeName",
		ErrNoRecord, pod.Spec.NodeName, gpusharev1.AllocationAnnotation)
	c.logger.Error(err, "Pod asks for GPUs and holds none", "pod", klog.KObj(pod))
	if c.opts.Refused != nil {
		c.opts.Refused(pod, err)
	}
}

// Why a record books nothing; check with errors.Is.
var (
	ErrNotBound      = errors.New("pod is not bound to a node: a record books GPUs only on a pod the scheduler bound")
	ErrRecordChanged = errors.New("allocation record changed after the pod was bound")
	ErrRequestEdited = errors.New("annotations that shape the pod's GPU request changed after it was bound")
	ErrNoRecord      = errors.New("pod asks for GPUs but holds none")
)

// needsRebuild reports whether a names a GPU that e's state does not
// list: the node is then rebuilt with that GPU, vanished.
func needsRebuild(e *nodeEntry, a *gpusharev1.Allocation) bool {
	index := uuidIndex(e.state.Node)
	for _, ca := range a.Containers {
		for _, g := range ca.GPUs {
			if _, ok := index[g.UUID]; !ok {
				return true
			}
		}
	}
	return false
}

func equalRecords(a, b *gpusharev1.Allocation) bool {
	x, err1 := gpusharev1.Marshal(a)
	y, err2 := gpusharev1.Marshal(b)
	return err1 == nil && err2 == nil && x == y
}

// parseRecord reads the record value of pod: gpushare's allocation, or
// with foreign the annotations another system left, translated
// (ForeignAllocation). Both are held to the same rules.
func (c *Cache) parseRecord(pod *corev1.Pod, value string, foreign bool) (*podEntry, error) {
	if foreign {
		return c.parseForeign(pod, value)
	}
	a, err := gpusharev1.ParseAllocation(value)
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName == "" {
		return nil, ErrNotBound
	}
	if pod.Spec.NodeName != a.Node {
		return nil, fmt.Errorf("pod is bound to node %s but its allocation is for node %s", pod.Spec.NodeName, a.Node)
	}
	p, err := PlacementFrom(a, nil)
	if err != nil {
		return nil, err
	}
	entry := &podEntry{key: pod.Namespace + "/" + pod.Name, node: a.Node, placement: p, record: value, alloc: a, pod: pod}
	if c.opts.Requests != nil {
		req, err := c.opts.Requests(c.asBound(pod, a))
		if err != nil {
			return nil, fmt.Errorf("the pod's own request: %w", err)
		}
		if err := alloc.Conform(p, req, nil); err != nil {
			return nil, err
		}
		entry.req = req
	}
	return entry, nil
}

// asBound returns pod as it was when record a was written: with the
// request-shaping annotations a keeps. A pod whose annotations did not
// change, or a record that keeps none, is returned as it is.
func (c *Cache) asBound(pod *corev1.Pod, a *gpusharev1.Allocation) *corev1.Pod {
	if a.Asked == nil || c.opts.RequestAnnotations == nil {
		return pod
	}
	keys := c.opts.RequestAnnotations(pod)
	if len(a.Asked.Edited(pod.Annotations, keys)) == 0 {
		return pod
	}
	bound := *pod
	bound.Annotations = a.Asked.Apply(pod.Annotations, keys)
	return &bound
}

// parseForeign is parseRecord for another system's record
// (ForeignAllocation): it is read through the pod's own request, so it
// needs Options.Requests. It is held to the pod's request when it is
// booked, once the node's GPUs are known: whole GPUs are sized by them.
func (c *Cache) parseForeign(pod *corev1.Pod, value string) (*podEntry, error) {
	sys := Foreign(pod)
	if pod.Spec.NodeName == "" {
		return nil, fmt.Errorf("%w: %w", sys, ErrNotBound)
	}
	if c.opts.Requests == nil {
		return nil, fmt.Errorf("%w: no request model to read it by", sys)
	}
	req, err := c.opts.Requests(pod)
	if err != nil {
		return nil, fmt.Errorf("%w: the pod's own request: %w", sys, err)
	}
	a, err := ForeignAllocation(pod, req)
	if err != nil {
		return nil, err
	}
	p, err := PlacementFrom(a, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sys, err)
	}
	return &podEntry{key: pod.Namespace + "/" + pod.Name, node: a.Node, placement: p, record: value, alloc: a,
		req: req, pod: pod, foreign: true}, nil
}

// RemovePod releases whatever a pod held or was assumed to hold.
func (c *Cache) RemovePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uncountLocked(uid)
	delete(c.refused, uid)
	delete(c.unrecorded, uid)
	if p := c.pods[uid]; p != nil {
		c.unbook(uid, p)
		delete(c.pods, uid)
	}
}

// countLocked counts a bound pod's CPU and memory against its node, once:
// a bound pod's requests and node do not change.
func (c *Cache) countLocked(pod *corev1.Pod) {
	if _, ok := c.bound[pod.UID]; ok {
		return
	}
	cpu, mem := c.opts.Resources(pod)
	r := podResources{node: pod.Spec.NodeName, cpu: max(cpu, 0), memoryMi: max(mem, 0)}
	c.bound[pod.UID] = r
	c.addRequested(r, 1)
}

func (c *Cache) uncountLocked(uid types.UID) {
	if r, ok := c.bound[uid]; ok {
		delete(c.bound, uid)
		c.addRequested(r, -1)
	}
}

// addRequested adds (sign 1) or takes away (-1) r on its node, in the
// sums and in the node's state.
func (c *Cache) addRequested(r podResources, sign int64) {
	sum := c.requested[r.node]
	sum.cpu += sign * r.cpu
	sum.memoryMi += sign * r.memoryMi
	if sum.cpu == 0 && sum.memoryMi == 0 {
		delete(c.requested, r.node)
	} else {
		c.requested[r.node] = sum
	}
	if e := c.nodes[r.node]; e != nil {
		e.state.CPUMilli += sign * r.cpu
		e.state.MemoryMiB += sign * r.memoryMi
	}
}

// ErrNodeGone is returned by Assume for a node the cache does not hold.
var ErrNodeGone = errors.New("node is not a gpushare node")

// ErrDaemonDown is returned by Read and ReadEach for a node whose daemon
// let its lease expire: it may not serve containers their GPUs.
var ErrDaemonDown = errors.New("gpushare-node on the node stopped renewing its lease")

// SetLease records until when node's daemon holds its lease, and reports
// whether that brings back a daemon whose lease had expired. A node
// without a lease is not judged by one (its daemon may predate leases).
func (c *Cache) SetLease(node string, expires time.Time) (recovered bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	old, had := c.leases[node]
	c.leases[node] = expires
	return had && now.After(old) && !now.After(expires)
}

// RemoveLease forgets node's lease, and the live use it carried.
func (c *Cache) RemoveLease(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.leases, node)
	if _, ok := c.leaseLive[node]; ok {
		delete(c.leaseLive, node)
		if e := c.nodes[node]; e != nil {
			c.applyLive(node, e)
		}
	}
}

// downLocked says whether node's daemon let its lease expire by now.
func (c *Cache) downLocked(node string, now time.Time) error {
	if expires, ok := c.leases[node]; ok && now.After(expires) {
		return fmt.Errorf("%w (it expired at %s): %s", ErrDaemonDown, expires.UTC().Format(time.RFC3339), node)
	}
	return nil
}

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
	entry := &podEntry{key: key, node: p.Node, placement: p, assumed: true}
	if err := e.state.Apply(p); err != nil {
		// Book the old placement again, on its own node.
		if old != nil {
			if oe := c.nodes[old.node]; oe != nil {
				oe.pods[uid] = old
				c.book(oe, old)
			}
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
	if err := c.downLocked(node, c.now()); err != nil {
		return nil, err
	}
	state := e.state
	if old := c.pods[uid]; old != nil && old.node == node && !old.invalid && !old.conflict {
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
	if err := c.downLocked(node, c.now()); err != nil {
		return err
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
	var now time.Time
	if len(c.leases) > 0 {
		now = c.now()
	}
	for _, name := range names {
		e := c.nodes[name]
		if e == nil {
			fn(name, nil, c.nodeErrorLocked(name))
			continue
		}
		if len(c.leases) > 0 {
			if err := c.downLocked(name, now); err != nil {
				fn(name, nil, err)
				continue
			}
		}
		fn(name, e.state, nil)
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
	return c.snapshotLocked(false)
}

// booked returns, per node sorted by name, a copy of its state whose GPU
// usage includes what conflicting bookings hold, how many records the
// cache refuses, and how many booked pods' requests were edited after
// binding: what the metrics show.
func (c *Cache) booked() (states []*alloc.NodeState, refused, edited int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, p := range c.pods {
		if len(p.edited) > 0 {
			edited++
		}
	}
	return c.snapshotLocked(true), len(c.refused), edited
}

func (c *Cache) snapshotLocked(withConflicts bool) []*alloc.NodeState {
	out := make([]*alloc.NodeState, 0, len(c.nodes))
	for _, e := range c.nodes {
		s := e.state.Clone()
		s.Node = copyNode(s.Node)
		if withConflicts {
			for i, o := range e.over {
				s.GPUs[i].MemoryMiB += o.MemoryMiB
				s.GPUs[i].Compute += o.Compute
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node.Name < out[j].Node.Name })
	return out
}

// ReadBooked calls fn with a copy of node's state whose GPU usage includes
// what conflicting bookings hold, as the metrics show it: a GPU that
// records over-commit shows more booked than it has.
func (c *Cache) ReadBooked(node string, fn func(*alloc.NodeState)) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.nodes[node]
	if e == nil {
		return c.nodeErrorLocked(node)
	}
	if err := c.downLocked(node, c.now()); err != nil {
		return err
	}
	s := e.state.Clone()
	s.Node = copyNode(s.Node)
	for i, o := range e.over {
		s.GPUs[i].MemoryMiB += o.MemoryMiB
		s.GPUs[i].Compute += o.Compute
	}
	fn(s)
	return nil
}

// Holding returns the placement the cache books for a pod, and whether it
// is only assumed; nil if the pod holds nothing.
func (c *Cache) Holding(uid types.UID) (p *alloc.Placement, assumed bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e := c.pods[uid]; e != nil && !e.invalid {
		return e.placement, e.assumed
	}
	return nil, false
}
