package dra

import (
	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/inventory"
	"github.com/gpushare/gpushare/pkg/record"
)

// PodBookings sums what pods book of each GPU of node, by UUID, by the
// scheduler's rules (record.Reader, alloc.Booking): gpushare's records
// and those of the systems it adopts (Aliyun, Elastic, HAMi), while the
// pods run, whether or not they still conform to their pods' requests. A
// record that cannot be read or placed on node books nothing here, as it
// books nothing in the scheduler.
func PodBookings(pods []*corev1.Pod, r record.Reader, node *alloc.Node) map[string]Share {
	out := map[string]Share{}
	for _, p := range pods {
		b, err := r.Holds(p, node)
		if err != nil {
			continue
		}
		for _, u := range b.Placement.Booked {
			out[u.UUID] = out[u.UUID].add(Share{MemoryMiB: u.MemoryMiB, ComputePercent: u.Compute})
		}
	}
	return out
}

// StartedBookings is PodBookings for a container of starting as it
// starts (Preparer.Beside): all that starting books, and of each other
// pod, what it books of each GPU on which one of its containers given
// that GPU has run. What a pod's containers have not started on they do
// not hold yet; counted, a pod refused beside a claim (its record came
// after) would get the containers of the pods that were there first
// refused as they restart.
func StartedBookings(pods []*corev1.Pod, starting *corev1.Pod, r record.Reader, node *alloc.Node) map[string]Share {
	out := PodBookings([]*corev1.Pod{starting}, r, node)
	for _, p := range pods {
		if p.UID == starting.UID {
			continue
		}
		b, err := r.Holds(p, node)
		if err != nil {
			continue
		}
		ran := map[string]bool{}
		for _, c := range b.Placement.Containers {
			if record.Ran(p, c.Name) {
				for _, g := range c.GPUs {
					ran[g.UUID] = true
				}
			}
		}
		for _, u := range b.Placement.Booked {
			if ran[u.UUID] {
				out[u.UUID] = out[u.UUID].add(Share{MemoryMiB: u.MemoryMiB, ComputePercent: u.Compute})
			}
		}
	}
	return out
}

// NodeOf describes gpus, node's GPUs, as the scheduler reads them from
// its inventory: what pods' records are placed on.
func NodeOf(node string, gpus []gpu.Device, o Options) *alloc.Node {
	mode := gpusharev1.ModeShared
	if o.WholeCard {
		mode = gpusharev1.ModeWholeCard
	}
	return record.NodeOf(node, inventory.From(gpus, mode, o.MPS))
}
