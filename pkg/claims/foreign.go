package claims

import (
	"slices"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// node is this node's GPUs as the core describes them, each with the
// memory a process can allocate: another system's record, which names
// GPUs by index, is placed on them.
func (c *Claims) node() *alloc.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := &alloc.Node{Name: c.cfg.Node, GPUs: make([]alloc.GPU, 0, len(c.gpus))}
	for _, d := range c.gpus {
		n.GPUs = append(n.GPUs, alloc.GPU{Index: d.Index, UUID: d.UUID, Model: d.Model, MemoryMiB: usable(d), Healthy: d.Healthy})
	}
	slices.SortFunc(n.GPUs, func(a, b alloc.GPU) int { return a.Index - b.Index })
	return n
}

// usable is the memory processes can allocate on d, as the inventory
// publishes it.
func usable(d gpu.Device) int64 {
	if d.UsableMemoryMiB > 0 && d.UsableMemoryMiB < d.MemoryMiB {
		return d.UsableMemoryMiB
	}
	return d.MemoryMiB
}
