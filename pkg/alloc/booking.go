package alloc

import (
	"cmp"
	"slices"
)

// Booking computes what a pod books on each GPU from what its containers
// got, by the rule Place uses: sidecars and app containers run together
// and add up; each init container runs beside the sidecars declared
// before it; the pod books, per GPU and per dimension, the most any phase
// uses. Containers must be in the pod's order (init containers first).
// The result is in GPU index order, without GPUs the pod does not use.
//
// Readers of a stored allocation use it to rebuild a node's bookings.
func Booking(containers []ContainerPlacement) []Assignment {
	uuids := map[int]string{}
	app := map[int]Usage{}
	for _, c := range containers {
		if c.Kind == Init {
			continue
		}
		for _, a := range c.GPUs {
			app[a.GPU] = app[a.GPU].add(a.Usage)
			uuids[a.GPU] = a.UUID
		}
	}
	booked := app
	sidecars := map[int]Usage{}
	for _, c := range containers {
		switch c.Kind {
		case Sidecar:
			for _, a := range c.GPUs {
				sidecars[a.GPU] = sidecars[a.GPU].add(a.Usage)
			}
		case Init:
			for _, a := range c.GPUs {
				uuids[a.GPU] = a.UUID
				booked[a.GPU] = booked[a.GPU].max(sidecars[a.GPU].add(a.Usage))
			}
		}
	}
	out := make([]Assignment, 0, len(booked))
	for g, u := range booked {
		if u != (Usage{}) {
			out = append(out, Assignment{GPU: g, UUID: uuids[g], Usage: u})
		}
	}
	slices.SortFunc(out, func(a, b Assignment) int { return cmp.Compare(a.GPU, b.GPU) })
	return out
}
