package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// TestNodeDaemonLeastPrivilege: gpushare-node runs as the service account
// of deploy/node-rbac.yaml, with a token bound to its pod on node gpu-a,
// as a DaemonSet's pod gets it. It publishes gpu-a's GPUs; it may not
// change another node, nor anything of its own node but gpushare's label
// and annotations, nor delete a node. Others are not held to that.
func TestNodeDaemonLeastPrivilege(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	admin, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	manifest, err := os.ReadFile(filepath.Join(root, "deploy", "node-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.Apply(ctx, admin, manifest); err != nil {
		t.Fatalf("applying deploy/node-rbac.yaml: %v", err)
	}
	bareNode(t, admin, "gpu-a")
	bareNode(t, admin, "gpu-b")
	kubeconfig, err := c.NodeDaemonKubeconfig(ctx, "gpu-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	daemon := clientFor(t, kubeconfig)
	patch := func(client kubernetes.Interface, node, body string) error {
		_, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	// The policy takes effect once the apiserver has loaded it.
	probe := `{"metadata":{"annotations":{"gpushare.io/probe":"1"}}}`
	if err := waitFor(30*time.Second, func() (bool, error) { return patch(daemon, "gpu-b", probe) != nil, nil }); err != nil {
		t.Fatalf("the daemon's token may still patch another node: %v", err)
	}

	// The daemon itself, with that token only, publishes its node's GPUs.
	simFile := filepath.Join(t.TempDir(), "gpus.yaml")
	if err := os.WriteFile(simFile, []byte("gpus:\n- {model: Tesla T4, memoryMiB: 16384, count: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run("gpushare-node", nodeBin(t), "--kubeconfig="+kubeconfig, "--node-name=gpu-a",
		"--simulated-gpus="+simFile, "--no-device-plugin", "--metrics-bind-address=", "-v=2"); err != nil {
		t.Fatal(err)
	}
	err = waitFor(30*time.Second, func() (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := n.Annotations[gpusharev1.InventoryAnnotation]
		return ok && n.Labels[gpusharev1.NodeLabel] == "true", nil
	})
	if err != nil {
		t.Fatalf("gpushare-node did not publish gpu-a's inventory with its own token: %v", err)
	}

	for name, c := range map[string]struct{ node, body, want string }{
		"another node's inventory": {"gpu-b", `{"metadata":{"annotations":{"gpushare.io/gpu-inventory":"{}"}}}`,
			"only the node its pod runs on (gpu-a), not gpu-b"},
		"another node's label": {"gpu-b", `{"metadata":{"labels":{"gpushare":"true"}}}`, "only the node its pod runs on"},
		"a label":              {"gpu-a", `{"metadata":{"labels":{"team":"a"}}}`, "only the gpushare label"},
		"removing a label":     {"gpu-a", `{"metadata":{"labels":{"kubernetes.io/hostname":null}}}`, "only the gpushare label"},
		"an annotation":        {"gpu-a", `{"metadata":{"annotations":{"example.com/owner":"a"}}}`, "only the gpushare.io/ annotations"},
		"cordoning":            {"gpu-a", `{"spec":{"unschedulable":true}}`, "spec"},
		"tainting":             {"gpu-a", `{"spec":{"taints":[{"key":"k","effect":"NoSchedule"}]}}`, "spec"},
		"a finalizer":          {"gpu-a", `{"metadata":{"finalizers":["example.com/keep"]}}`, "finalizers"},
		"another node's spec":  {"gpu-b", `{"spec":{"unschedulable":true}}`, "only the node its pod runs on"},
	} {
		err := patch(daemon, c.node, c.body)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: the daemon's patch of %s gave %v; want an error containing %q", name, c.node, err, c.want)
		}
	}
	// Its own node's gpushare annotations and label, it may change.
	if err := patch(daemon, "gpu-a", `{"metadata":{"annotations":{"gpushare.io/gpu-usage":null},"labels":{"gpushare":"true"}}}`); err != nil {
		t.Errorf("the daemon may not change its own node's gpushare annotations: %v", err)
	}
	// Deleting a node, or reading secrets, is not in its role.
	if err := daemon.CoreV1().Nodes().Delete(ctx, "gpu-a", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the daemon deleting its own node gave %v; want forbidden", err)
	}
	if _, err := daemon.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the daemon listing secrets gave %v; want forbidden", err)
	}
	// The policy binds gpushare-node alone.
	if err := patch(admin, "gpu-b", `{"metadata":{"labels":{"team":"b"}},"spec":{"unschedulable":true}}`); err != nil {
		t.Errorf("an administrator may not label and cordon a node: %v", err)
	}
}
