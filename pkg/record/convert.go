package record

import (
	"errors"
	"fmt"
	"unique"

	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// NodeFrom returns the core's description of a Node's GPUs, CPU and
// memory, or why the node takes no part: it does not opt in, or its
// inventory is missing or invalid. CPU and memory are the node's
// allocatable amounts (memory rounded up to a MiB); one the node does not
// report is Unlimited: kube-scheduler judges it alone.
func NodeFrom(n *corev1.Node) (*alloc.Node, error) {
	if n.Labels[gpusharev1.NodeLabel] != "true" {
		return nil, fmt.Errorf("node %s does not opt in to gpushare (label %s=true)", n.Name, gpusharev1.NodeLabel)
	}
	value, ok := n.Annotations[gpusharev1.InventoryAnnotation]
	if !ok {
		return nil, fmt.Errorf("node %s has no GPU inventory (annotation %s); is its node daemon running?", n.Name, gpusharev1.InventoryAnnotation)
	}
	inv, err := gpusharev1.ParseInventory(value)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	node := NodeOf(n.Name, inv)
	node.CPUMilli, node.MemoryMiB = Capacity(n)
	return node, node.Validate()
}

// NodeOf returns the core's description of the GPUs inv lists, on node
// name: what the scheduler books records against, and the node daemon
// and the DRA driver too. Its CPU and memory are left zero.
func NodeOf(name string, inv *gpusharev1.GPUInventory) *alloc.Node {
	node := &alloc.Node{Name: name, GPUs: make([]alloc.GPU, len(inv.GPUs))}
	if inv.Mode == gpusharev1.ModeWholeCard {
		node.Mode = alloc.WholeCard
	}
	for i, g := range inv.GPUs {
		// Nodes share a few models: each is held once (unique.Make),
		// not once per GPU of every node.
		node.GPUs[i] = alloc.GPU{Index: g.Index, UUID: g.UUID, Model: unique.Make(g.Model).Value(), MemoryMiB: g.Usable(),
			Healthy: g.Healthy, NUMANode: g.NUMANode, Peers: g.NVLinkPeers, MPS: g.MPS}
	}
	return node
}

// Unlimited is the CPU (milli) or memory (MiB) of a node that does not
// report it as allocatable.
const Unlimited = 1 << 40

// Capacity returns the node's allocatable CPU (milli) and memory (MiB,
// rounded up), each Unlimited if the node does not report it.
func Capacity(n *corev1.Node) (cpuMilli, memoryMiB int64) {
	cpuMilli, memoryMiB = Unlimited, Unlimited
	if q, ok := n.Status.Allocatable[corev1.ResourceCPU]; ok {
		cpuMilli = max(q.MilliValue(), 0)
	}
	if q, ok := n.Status.Allocatable[corev1.ResourceMemory]; ok {
		memoryMiB = max((q.Value()+1<<20-1)>>20, 0)
	}
	return cpuMilli, memoryMiB
}

var kinds = map[alloc.ContainerKind]gpusharev1.ContainerKind{
	alloc.App:     gpusharev1.ContainerApp,
	alloc.Init:    gpusharev1.ContainerInit,
	alloc.Sidecar: gpusharev1.ContainerSidecar,
}

// Record turns a placement into the allocation record stored on the pod.
func Record(p *alloc.Placement) *gpusharev1.Allocation {
	a := &gpusharev1.Allocation{Node: p.Node}
	for _, c := range p.Containers {
		ca := gpusharev1.ContainerAllocation{Name: c.Name, Kind: kinds[c.Kind]}
		for _, g := range c.GPUs {
			ca.GPUs = append(ca.GPUs, gpusharev1.GPUShare{Index: g.GPU, UUID: g.UUID, MemoryMiB: g.MemoryMiB, Compute: g.Compute})
		}
		a.Containers = append(a.Containers, ca)
	}
	return a
}

// PlacementFrom turns a pod's allocation record back into a placement on
// node, checking that every GPU it names is the node's (index and UUID).
// With node nil it checks nothing: the node is not known yet.
func PlacementFrom(a *gpusharev1.Allocation, node *alloc.Node) (*alloc.Placement, error) {
	if node != nil && a.Node != node.Name {
		return nil, fmt.Errorf("allocation is for node %s, not %s", a.Node, node.Name)
	}
	p := &alloc.Placement{Node: a.Node}
	for _, c := range a.Containers {
		cp := alloc.ContainerPlacement{Name: c.Name}
		for k, v := range kinds {
			if v == c.Kind {
				cp.Kind = k
			}
		}
		for _, g := range c.GPUs {
			if node != nil && (g.Index < 0 || g.Index >= len(node.GPUs) || node.GPUs[g.Index].UUID != g.UUID) {
				return nil, fmt.Errorf("container %s: node %s has no GPU %d with UUID %s", c.Name, node.Name, g.Index, g.UUID)
			}
			cp.GPUs = append(cp.GPUs, alloc.Assignment{GPU: g.Index, UUID: g.UUID,
				Usage: alloc.Usage{MemoryMiB: g.MemoryMiB, Compute: g.Compute}})
		}
		p.Containers = append(p.Containers, cp)
	}
	p.Booked = alloc.Booking(p.Containers)
	return p, nil
}

// ErrRequestEdited says that a pod's request-shaping annotations are no
// longer those its record keeps (gpusharev1.Asked): the pod was edited
// after it was bound.
var ErrRequestEdited = errors.New("annotations that shape the pod's GPU request changed after it was bound")
