package holder

import (
	"cmp"
	"slices"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/inventory"
	"github.com/gpushare/gpushare/pkg/record"
)

// node is this node's GPUs as its inventory publishes them, which the
// scheduler places records on: each with the memory a process can
// allocate, less the node's reservation.
func (c *Resolver) node() *alloc.Node {
	c.mu.Lock()
	devs := make([]gpu.Device, 0, len(c.gpus))
	for _, d := range c.gpus {
		devs = append(devs, d)
	}
	c.mu.Unlock()
	slices.SortFunc(devs, func(a, b gpu.Device) int { return a.Index - b.Index })
	if c.cfg.ReservedMiB != nil {
		devs = inventory.Reserve(devs, c.cfg.ReservedMiB)
	}
	return record.NodeOf(c.cfg.Node, inventory.From(devs, cmp.Or(c.cfg.Mode, gpusharev1.ModeShared), c.cfg.MPS != nil))
}
