package node

import (
	"context"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// health is the one watch of the GPUs' health: the daemon's loop passes
// each event on to the inventory and to the device plugins.
type health struct {
	backend gpu.Backend
	events  chan gpu.Event
}

func newHealth(b gpu.Backend) *health {
	return &health{backend: b, events: make(chan gpu.Event, 16)}
}

// watch sends the backend's health events to h.events until ctx ends.
func (h *health) watch(ctx context.Context) error {
	return h.backend.Watch(ctx, h.events)
}
