package cache

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/record"
)

// SetNode adds or updates a node. A node that does not opt in, or whose
// inventory is invalid, is dropped and its reason kept for NodeError.
func (c *Cache) SetNode(n *corev1.Node) {
	src, ok := sourceOf(n)
	if ok && c.setUnchangedNode(n, src) {
		return
	}
	node, err := record.NodeFrom(n)
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
		c.keepEntry(old, n, src)
		return
	}
	e := &nodeEntry{inventory: node, source: src, nodeUsage: c.nodeUsage(n)}
	c.dropNode(n.Name)
	// The key is a copy: the Node object's name lies somewhere in the
	// informer's store, while the copies, made one after another, lie
	// together. Filter looks up hundreds of nodes per pod by name, and
	// reading each key's bytes from afar cost more than rating the node.
	e.name = strings.Clone(n.Name)
	if len(e.name) <= len(e.short) {
		e.shortLen = uint8(copy(e.short[:], e.name))
	}
	c.nodes[e.name] = e
	c.setObject(e, n)
	c.countGPUs(node, 1)
	for uid, p := range c.pods {
		if p.node == n.Name {
			e.pods = append(e.pods, nodePod{uid: uid, entry: p})
		}
	}
	c.rebuild(e)
	c.applyLive(n.Name, e)
	c.logger.V(2).Info("Node GPU inventory", "node", klog.KObj(n), "gpus", len(node.GPUs), "mode", node.Mode, "pods", len(e.pods))
}

// nodeSource is what of a Node its inventory is read from
// (record.NodeFrom), besides the opt-in label.
type nodeSource struct {
	inventory           string
	cpuMilli, memoryMiB int64
}

// sourceOf returns what n's inventory would be read from; false if n
// does not opt in or has no inventory.
func sourceOf(n *corev1.Node) (nodeSource, bool) {
	value, ok := n.Annotations[gpusharev1.InventoryAnnotation]
	if !ok || n.Labels[gpusharev1.NodeLabel] != "true" {
		return nodeSource{}, false
	}
	cpu, mem := record.Capacity(n)
	return nodeSource{inventory: value, cpuMilli: cpu, memoryMiB: mem}, true
}

// setUnchangedNode takes n as the node's latest object if the entry
// was read from the same source, and reports whether it did. Most
// updates of a Node (status, conditions, taints, labels) leave its
// inventory as it was, and are taken without parsing it again.
func (c *Cache) setUnchangedNode(n *corev1.Node, src nodeSource) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.nodes[n.Name]
	if old == nil || old.source != src {
		return false
	}
	c.keepEntry(old, n, src)
	return true
}

// keepEntry keeps e, whose inventory n leaves as it was, with n as the
// node's latest object, read from src (the same text as e's source may
// be, but the new object's: the old one's can go), and n's live use.
func (c *Cache) keepEntry(e *nodeEntry, n *corev1.Node, src nodeSource) {
	e.source = src
	c.setObject(e, n)
	e.nodeUsage = c.nodeUsage(n)
	c.applyLive(n.Name, e)
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
		delete(c.objects, e.object)
		// ReadEach's hints may still point here; this one leads nowhere.
		e.gone = true
		e.after.Store(nil)
	}
}

// setObject has e found by n from now on, and no longer by the object
// it was set from before.
func (c *Cache) setObject(e *nodeEntry, n *corev1.Node) {
	delete(c.objects, e.object)
	e.object = n
	c.objects[n] = e
}

func (c *Cache) countGPUs(n *alloc.Node, delta int) {
	for _, g := range n.GPUs {
		if c.gpuSizes[g.MemoryMiB] += delta; c.gpuSizes[g.MemoryMiB] <= 0 {
			delete(c.gpuSizes, g.MemoryMiB)
		}
		k := gpuKind{model: g.Model, memoryMiB: g.MemoryMiB, mps: g.MPS}
		if c.gpuKinds[k] += delta; c.gpuKinds[k] <= 0 {
			delete(c.gpuKinds, k)
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
// alloc.CompareSupply, with the free share the bookings leave of them,
// and a generation that changes when the GPUs do (not with bookings).
func (c *Cache) Supply() ([]alloc.Supply, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]alloc.Supply, 0, len(c.supply))
	for kind, n := range c.supply {
		kind.GPUs = n
		out = append(out, kind)
	}
	slices.SortFunc(out, alloc.CompareSupply)
	for _, e := range c.nodes {
		alloc.AddFree(out, e.state)
	}
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

// gpuKind is what prices a GPU (pkg/quota): its model, memory and MPS.
type gpuKind struct {
	model     string
	memoryMiB int64
	mps       bool
}

// Kinds returns one GPU of each model, memory and MPS setting the nodes
// have, healthy or not, in no particular order: enough to price a
// request that leaves its memory to the GPU (quota.Of).
func (c *Cache) Kinds() []alloc.GPU {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]alloc.GPU, 0, len(c.gpuKinds))
	for k := range c.gpuKinds {
		out = append(out, alloc.GPU{Model: k.model, MemoryMiB: k.memoryMiB, MPS: k.mps, Healthy: true})
	}
	return out
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
	e.over, e.past = nil, nil
	e.resum()
	for _, p := range pods {
		c.book(e, p)
	}
}

// resum makes e.sum again from e.state: call it after every change to the
// state (alloc.Summary).
func (e *nodeEntry) resum() { e.sum = e.state.Summarize() }

// verifySummaries, set by the package's tests, makes every read of an
// entry check that its Summary is its state's as it is now: a change to
// the state that does not resum fails the test that reads it.
var verifySummaries bool

// verified returns e's Summary, checked when verifySummaries is set.
func (e *nodeEntry) verified() *alloc.Summary {
	if verifySummaries && e.sum != e.state.Summarize() {
		panic(fmt.Sprintf("node %s: the Summary is not its state's", e.name))
	}
	return &e.sum
}

// VanishedModel is the model a GPU gets in the cache when the node's
// inventory no longer lists a GPU that a record holds.
const VanishedModel = "vanished"

// withVanished returns inv with one unhealthy GPU appended for each UUID
// that a record of pods names and inv does not list, sized to hold every
// record's share of it: a copy if there are any, else inv itself (a Node
// never changes in place, so the two may share it).
func withVanished(inv *alloc.Node, pods []*podEntry) *alloc.Node {
	n := inv
	var index map[string]int
	for _, p := range pods {
		if p.record == "" || p.foreign && !p.pinned {
			continue
		}
		if index == nil {
			index = uuidIndex(inv)
		}
		for _, ca := range p.placement.Containers {
			for _, g := range ca.GPUs {
				i, ok := index[g.UUID]
				if !ok {
					if n == inv {
						n = copyNode(inv)
					}
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
func sortedEntries(pods nodePods) []*podEntry {
	out := make([]*podEntry, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.entry)
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

func copyNode(n *alloc.Node) *alloc.Node {
	c := *n
	c.GPUs = append([]alloc.GPU(nil), n.GPUs...)
	return &c
}

// ErrNodeGone is returned by Assume for a node the cache does not hold.
var ErrNodeGone = errors.New("node is not a gpushare node")
