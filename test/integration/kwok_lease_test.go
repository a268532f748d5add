package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// TestKwokNodeLeases: with NodeLeases (the demo's), kwok renews a Lease
// for each node it manages, as a kubelet does, so that a stall or a
// restart of kwok shorter than the Lease leaves the node Ready; without
// (the tests' and benchmarks' clusters), a kwok node has none.
func TestKwokNodeLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, leases := range []bool{true, false} {
		c := startClusterWith(t, controlplane.Options{NodeLeases: leases})
		client, err := c.Client()
		if err != nil {
			t.Fatal(err)
		}
		createNodes(t, client, controlplane.NodeSpec{Name: "kwok-0", Model: "NVIDIA GPU", MemoryMiB: 16384, Count: 1})
		leaseOf := func() (*metav1.MicroTime, error) {
			l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "kwok-0", metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return l.Spec.RenewTime, nil
		}
		if !leases {
			// Ready by now (createNodes), through kwok's status heartbeat.
			if _, err := leaseOf(); !apierrors.IsNotFound(err) {
				t.Errorf("without NodeLeases: the node's Lease: %v, want none", err)
			}
			c.Stop()
			continue
		}
		var first *metav1.MicroTime
		if err := waitFor(30*time.Second, func() (bool, error) {
			first, err = leaseOf()
			return err == nil && first != nil, nil
		}); err != nil {
			t.Fatalf("with NodeLeases: kwok made no Lease for its node: %v", err)
		}
		// kwok renews every quarter of the Lease's 20 s.
		if err := waitFor(30*time.Second, func() (bool, error) {
			now, err := leaseOf()
			return err == nil && now != nil && now.After(first.Time), nil
		}); err != nil {
			t.Errorf("with NodeLeases: the node's Lease was not renewed after %s: %v", first, err)
		}
		c.Stop()
	}
}
