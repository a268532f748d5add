package webhook

import (
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/record"
)

// GPUs keeps the kinds of GPU the cluster's gpushare nodes have, from
// their inventories: one GPU of each model, memory and MPS, which is all
// pricing needs. It is safe for concurrent use.
type GPUs struct {
	mu    sync.Mutex
	nodes map[string][]kind
	// list is the kinds of every node, nil when a node changed since.
	list []alloc.GPU
}

// kind is what prices a GPU.
type kind struct {
	model  string
	memory int64
	mps    bool
}

// Set records node n's GPUs; a node that does not take part in gpushare
// (no opt-in label, no valid inventory) has none.
func (g *GPUs) Set(n *corev1.Node) {
	var kinds []kind
	if node, err := record.NodeFrom(n); err == nil {
		for _, gpu := range node.GPUs {
			k := kind{model: gpu.Model, memory: gpu.MemoryMiB, mps: gpu.MPS}
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.nodes == nil {
		g.nodes = map[string][]kind{}
	}
	if old, ok := g.nodes[n.Name]; ok && slices.Equal(old, kinds) {
		return
	}
	g.nodes[n.Name] = kinds
	g.list = nil
}

// Delete forgets node name.
func (g *GPUs) Delete(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.nodes[name]; ok {
		delete(g.nodes, name)
		g.list = nil
	}
}

// List returns one GPU of each kind in the cluster. The caller must not
// change it.
func (g *GPUs) List() []alloc.GPU {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.list == nil {
		seen := map[kind]bool{}
		g.list = []alloc.GPU{}
		for _, kinds := range g.nodes {
			for _, k := range kinds {
				if !seen[k] {
					seen[k] = true
					g.list = append(g.list, alloc.GPU{Model: k.model, MemoryMiB: k.memory, MPS: k.mps, Healthy: true})
				}
			}
		}
	}
	return g.list
}
