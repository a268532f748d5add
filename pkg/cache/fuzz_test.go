package cache_test

import (
	"errors"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/record"
)

// Records are written by whoever may edit a pod: whatever three pods
// carry, bound or not, edited or not, the cache never panics, never books
// a healthy GPU beyond its capacity, books only what the pods' requests
// ask or what a record that does not conform names (failing closed: it
// books that while its pod runs, and is reported), and once the pods are
// gone holds nothing.
func FuzzRecords(f *testing.F) {
	ok := `{"apiVersion":"gpushare.io/v1alpha1","kind":"Allocation","node":"n1","containers":[{"name":"c0","kind":"App","gpus":[{"index":0,"uuid":"GPU-n1-0","memoryMiB":2048,"compute":0}]}]}`
	big := `{"apiVersion":"gpushare.io/v1alpha1","kind":"Allocation","node":"n1","containers":[{"name":"c0","kind":"App","gpus":[{"index":1,"uuid":"GPU-n1-1","memoryMiB":16384,"compute":0}]}]}`
	gone := `{"apiVersion":"gpushare.io/v1alpha1","kind":"Allocation","node":"n1","containers":[{"name":"c0","kind":"App","gpus":[{"index":5,"uuid":"GPU-gone","memoryMiB":2048,"compute":0}]}]}`
	f.Add(ok, ok, big, uint8(0b111), uint8(0))
	f.Add(ok, gone, "{", uint8(0b011), uint8(0b100))
	f.Add(big, big, ok, uint8(0b101), uint8(0b010))
	f.Fuzz(func(t *testing.T, r0, r1, r2 string, bound, edits uint8) {
		asks := func(*corev1.Pod) (*alloc.PodRequest, error) { return sharedRequest("default/p", "c0", 2048), nil }
		unconforming := 0
		c := cache.New(logr.Discard(), cache.Options{Requests: asks, Refused: func(_ *corev1.Pod, err error) {
			if errors.Is(err, record.ErrUnconforming) {
				unconforming++
			}
		}})
		c.SetNode(gpuNode(t, "n1", 16384, 16384))
		records := []string{r0, r1, r2}
		for i, r := range records {
			node := ""
			if bound&(1<<i) != 0 {
				node = "n1"
			}
			c.SetPod(podWith(string(rune('a'+i)), node, r))
		}
		// Edits: each pod's record becomes the next pod's.
		for i := range records {
			if edits&(1<<i) != 0 {
				c.SetPod(podWith(string(rune('a'+i)), "n1", records[(i+1)%len(records)]))
			}
		}
		for _, s := range c.Snapshot() {
			for g, u := range s.GPUs {
				gpu := s.Node.GPUs[g]
				if gpu.Healthy && !gpu.Holds(u) {
					t.Fatalf("healthy GPU %d books %+v beyond its capacity", g, u)
				}
				if gpu.Healthy && u.MemoryMiB%2048 != 0 && unconforming == 0 {
					t.Fatalf("GPU %d books %d MiB, not a sum of the 2048 MiB the pods ask, and no record was reported unconforming", g, u.MemoryMiB)
				}
			}
		}
		for i := range records {
			c.RemovePod(types.UID(string(rune('a' + i))))
		}
		s := c.Snapshot()[0]
		if len(s.Node.GPUs) != 2 || !cmp.Equal(s.GPUs, make([]alloc.Usage, 2)) {
			t.Fatalf("after every pod went the node holds %+v: %v", s.Node.GPUs, s.GPUs)
		}
	})
}
