package inspect

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// Live use is read from the node daemon's lease; a newer sample on the
// Node (a daemon from before the move) wins, and a node without a lease
// sample shows its Node's.
func TestUsageFromLease(t *testing.T) {
	at := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	t4 := func(name string) *gpusharev1.GPUInventory {
		return inventory(name, gpusharev1.ModeShared, gpusharev1.GPU{Model: "Tesla T4", MemoryMiB: 15360, Healthy: true})
	}
	lease := func(node, usage string) coordinationv1.Lease {
		return coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: gpusharev1.LeaseNamespace,
			Name: gpusharev1.LeasePrefix + node, Annotations: map[string]string{gpusharev1.UsageAnnotation: usage}}}
	}
	c := Build(Input{
		Nodes: []corev1.Node{
			node(t, "lease-only", "10.0.0.1", t4("lease-only"), ""),
			node(t, "node-older", "10.0.0.2", t4("node-older"), usage(t, at.Add(-time.Minute), 100)),
			node(t, "node-newer", "10.0.0.3", t4("node-newer"), usage(t, at.Add(time.Second), 300)),
			node(t, "no-lease", "10.0.0.4", t4("no-lease"), usage(t, at, 400)),
		},
		Leases: []coordinationv1.Lease{
			lease("lease-only", usage(t, at, 1000)),
			lease("node-older", usage(t, at, 2000)),
			lease("node-newer", usage(t, at, 3000)),
			{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: gpusharev1.LeasePrefix + "no-lease",
				Annotations: map[string]string{gpusharev1.UsageAnnotation: usage(t, at, 9999)}}},
		},
		Now: at,
	})
	want := map[string]int64{"lease-only": 1000, "node-older": 2000, "node-newer": 300, "no-lease": 400}
	for _, n := range c.Nodes {
		if n.Error != "" || len(n.GPUs) == 0 || n.GPUs[0].Live == nil {
			t.Errorf("node %s: no live use (%s)", n.Name, n.Error)
			continue
		}
		if got := n.GPUs[0].Live.MemoryMiB; got != want[n.Name] {
			t.Errorf("node %s shows %d MiB in use, want %d", n.Name, got, want[n.Name])
		}
	}
}
