package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// TestInventoryRestored: gpushare-node, with the credentials it has when
// deployed (deploy/node-rbac.yaml, a token bound to its pod on the node),
// puts its node's inventory and label back within seconds whenever an
// administrator changes them: an inventory overwritten with garbage, one
// with an extra GPU, the gpushare label removed. It logs each restore,
// once.
func TestInventoryRestored(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	admin, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := controlplane.Apply(ctx, admin, readFile(t, "deploy/node-rbac.yaml")); err != nil {
		t.Fatalf("applying deploy/node-rbac.yaml: %v", err)
	}
	bareNode(t, admin, "gpu-a")
	kubeconfig, err := c.NodeDaemonKubeconfig(ctx, "gpu-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mayWatchNodes(t, kubeconfig)

	simFile := filepath.Join(t.TempDir(), "gpus.yaml")
	if err := os.WriteFile(simFile, []byte("gpus:\n- {model: Tesla T4, memoryMiB: 15360, count: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	daemon, err := c.Run("gpushare-node", nodeBin(t), "--kubeconfig="+kubeconfig, "--node-name=gpu-a",
		"--simulated-gpus="+simFile, "--no-device-plugin", "--metrics-bind-address=", "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	// published reports whether the node holds the daemon's label and an
	// inventory the scheduler reads as want (any inventory if want is nil).
	published := func(want *gpusharev1.GPUInventory) (*gpusharev1.GPUInventory, bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		inv, err := gpusharev1.ParseInventory(n.Annotations[gpusharev1.InventoryAnnotation])
		if err != nil || n.Labels[gpusharev1.NodeLabel] != "true" {
			return nil, false, nil
		}
		if want == nil {
			return inv, true, nil
		}
		got, err := gpusharev1.Marshal(inv)
		if err != nil {
			return nil, false, err
		}
		w, err := gpusharev1.Marshal(want)
		return inv, err == nil && got == w, err
	}
	var ownInv *gpusharev1.GPUInventory
	err = waitFor(30*time.Second, func() (ok bool, err error) {
		ownInv, ok, err = published(nil)
		return ok, err
	})
	if err != nil {
		t.Fatalf("gpushare-node did not publish gpu-a's inventory: %v", err)
	}
	if len(ownInv.GPUs) != 2 {
		t.Fatalf("published %+v; want two T4s", ownInv.GPUs)
	}

	extra := *ownInv
	extra.GPUs = append(append([]gpusharev1.GPU(nil), ownInv.GPUs...), gpusharev1.GPU{Index: 2, UUID: "GPU-forged-2",
		Model: "Tesla T4", MemoryMiB: 15360, Healthy: true, NUMANode: -1})
	extraValue, err := gpusharev1.Marshal(&extra)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		patch string
		// landed checks that the administrator's patch took effect.
		landed func(*corev1.Node) bool
	}{
		{"inventory overwritten with garbage", `{"metadata":{"annotations":{"gpushare.io/gpu-inventory":"garbage"}}}`,
			func(n *corev1.Node) bool { return n.Annotations[gpusharev1.InventoryAnnotation] == "garbage" }},
		{"inventory with an extra GPU", `{"metadata":{"annotations":{"gpushare.io/gpu-inventory":` + jsonString(t, extraValue) + `}}}`,
			func(n *corev1.Node) bool { return n.Annotations[gpusharev1.InventoryAnnotation] == extraValue }},
		{"gpushare label removed", `{"metadata":{"labels":{"gpushare":null}}}`,
			func(n *corev1.Node) bool { _, ok := n.Labels[gpusharev1.NodeLabel]; return !ok }},
	}
	for _, s := range steps {
		n, err := admin.CoreV1().Nodes().Patch(ctx, "gpu-a", types.MergePatchType, []byte(s.patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !s.landed(n) {
			t.Fatalf("%s: the administrator's patch left the node with label %q and inventory %s", s.name,
				n.Labels[gpusharev1.NodeLabel], n.Annotations[gpusharev1.InventoryAnnotation])
		}
		start := time.Now()
		if err := waitFor(10*time.Second, func() (bool, error) {
			_, ok, err := published(ownInv)
			return ok, err
		}); err != nil {
			t.Fatalf("%s: gpushare-node did not put the inventory and label back within 10 s: %v", s.name, err)
		}
		t.Logf("%s: restored after %v", s.name, time.Since(start).Round(10*time.Millisecond))
	}

	// One restore, and one log line, for each change; nothing more once
	// the node holds the inventory again.
	time.Sleep(3 * time.Second)
	log, err := os.ReadFile(daemon.Log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "Node's GPU inventory was changed by someone else; restoring it"); n != len(steps) {
		t.Errorf("gpushare-node logged %d restores, want %d:\n%s", n, len(steps), log)
	}
	if _, ok, err := published(ownInv); !ok || err != nil {
		t.Errorf("gpu-a no longer holds its inventory (%v)", err)
	}
}

// mayWatchNodes fails the test unless the daemon's credentials in
// kubeconfig (deploy/node-rbac.yaml) may list and watch nodes, with which
// it watches its own node.
func mayWatchNodes(t *testing.T, kubeconfig string) {
	t.Helper()
	ctx := context.Background()
	daemon := clientFor(t, kubeconfig)
	for _, verb := range []string{"list", "watch"} {
		r, err := daemon.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Resource: "nodes"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Status.Allowed {
			t.Fatalf("deploy/node-rbac.yaml does not let gpushare-node %s nodes", verb)
		}
	}
}

// jsonString quotes s as a JSON string.
func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
