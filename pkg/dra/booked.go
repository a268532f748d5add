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

// NodeOf describes gpus, node's GPUs, as the scheduler reads them from
// its inventory: what pods' records are placed on.
func NodeOf(node string, gpus []gpu.Device, o Options) *alloc.Node {
	mode := gpusharev1.ModeShared
	if o.WholeCard {
		mode = gpusharev1.ModeWholeCard
	}
	return record.NodeOf(node, inventory.From(gpus, mode, o.MPS))
}
