package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/decision"
)

// TestDaemonLease: gpushare-node, with its least-privilege credentials,
// renews its lease while it runs; once it stops, gpushare-scheduler sends
// no GPU pod to its node and says why, and once it runs again new pods land
// there. Its token may not write another node's lease.
func TestDaemonLease(t *testing.T) {
	t.Parallel()
	c, admin, _ := startPlugin(t, nil)
	ctx := context.Background()
	if err := controlplane.Apply(ctx, admin, readFile(t, "deploy/node-rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-a", Bare: true})
	kubeconfig, err := c.NodeDaemonKubeconfig(ctx, "gpu-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	simFile := filepath.Join(t.TempDir(), "gpus.yaml")
	if err := os.WriteFile(simFile, []byte("gpus:\n- {model: Tesla T4, memoryMiB: 15360, count: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() *controlplane.Process {
		t.Helper()
		p, err := c.Run("gpushare-node", nodeBin(t), "--kubeconfig="+kubeconfig, "--node-name=gpu-a",
			"--simulated-gpus="+simFile, "--no-device-plugin", "--metrics-bind-address=", "--lease-duration=4s", "-v=2")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	daemon := start()
	if _, err := admin.CoreV1().Pods("default").Create(ctx, gpuPod("first", 1024, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	record(t, boundPod(t, admin, "default", "first"))
	l, err := admin.CoordinationV1().Leases(gpusharev1.LeaseNamespace).Get(ctx, gpusharev1.LeasePrefix+"gpu-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the daemon holds no lease: %v", err)
	}
	if *l.Spec.HolderIdentity != "gpu-a" || *l.Spec.LeaseDurationSeconds != 4 {
		t.Fatalf("lease %+v, want held by gpu-a for 4 s", l.Spec)
	}

	// Its token may not write another node's lease (once the API server
	// has loaded the policy; dry runs until then, so nothing is created).
	daemonClient := clientFor(t, kubeconfig)
	other := l.DeepCopy()
	other.Name, other.ResourceVersion, other.UID = gpusharev1.LeasePrefix+"gpu-b", "", ""
	var last error
	err = waitFor(30*time.Second, func() (bool, error) {
		_, last = daemonClient.CoordinationV1().Leases(gpusharev1.LeaseNamespace).Create(ctx, other,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil, nil
	})
	if err != nil || !strings.Contains(last.Error(), "may write only the lease of the node its pod runs on") {
		t.Fatalf("creating another node's lease with the daemon's token: %v, want it refused", last)
	}

	daemon.Stop(5 * time.Second)
	time.Sleep(5 * time.Second) // the lease lapses
	if _, err := admin.CoreV1().Pods("default").Create(ctx, gpuPod("second", 1024, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, admin, "default", "second", decision.ReasonDaemonDown)

	// Back: the pod turned away is retried at once (kube-scheduler would
	// otherwise leave it for up to five minutes), and new pods land.
	start()
	record(t, boundPod(t, admin, "default", "second"))
	if _, err := admin.CoreV1().Pods("default").Create(ctx, gpuPod("third", 1024, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	record(t, boundPod(t, admin, "default", "third"))
}
