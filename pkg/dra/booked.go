package dra

import (
	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/record"
)

// PodBookings sums what pods book of each GPU, by UUID, from their
// allocation records, by the scheduler's rule (alloc.Booking): the pods
// that have not ended. A record that cannot be read books nothing here:
// the scheduler refuses such records too.
func PodBookings(pods []*corev1.Pod) map[string]Share {
	out := map[string]Share{}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		v, ok := p.Annotations[gpusharev1.AllocationAnnotation]
		if !ok {
			continue
		}
		a, err := gpusharev1.ParseAllocation(v)
		if err != nil {
			continue
		}
		pl, err := record.PlacementFrom(a, nil)
		if err != nil {
			continue
		}
		for _, b := range pl.Booked {
			out[b.UUID] = out[b.UUID].add(Share{MemoryMiB: b.MemoryMiB, ComputePercent: b.Compute})
		}
	}
	return out
}
