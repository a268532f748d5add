package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// TestNodeDaemonInventory: gpushare-node publishes a simulated node's GPUs
// on a kwok node that carries none; gpushare-scheduler then places pods on
// them by UUID, and a failed GPU is taken out of scheduling.
func TestNodeDaemonInventory(t *testing.T) {
	t.Parallel()
	c, client, _ := startPlugin(t, nil)
	ctx := context.Background()
	bareNode(t, client, "h200-0")
	simFile := filepath.Join(t.TempDir(), "gpus.yaml")
	if err := os.WriteFile(simFile, []byte("gpus:\n- {model: NVIDIA H200, memoryMiB: 143771, count: 2, nvlink: all}\nfailures:\n- {index: 1, after: 8s, xid: 79}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := nodeBin(t)
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	if _, err := c.Run("gpushare-node", bin, "--kubeconfig="+c.Kubeconfig, "--node-name=h200-0",
		"--simulated-gpus="+simFile, "--no-device-plugin", "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port), "-v=2"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var inv *gpusharev1.GPUInventory
	err = waitFor(30*time.Second, func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "h200-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v, ok := n.Annotations[gpusharev1.InventoryAnnotation]
		if !ok || n.Labels[gpusharev1.NodeLabel] != "true" {
			return false, nil
		}
		inv, err = gpusharev1.ParseInventory(v)
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("gpushare-node did not publish the inventory: %v", err)
	}
	if len(inv.GPUs) != 2 || inv.GPUs[0].MemoryMiB != 143771 {
		t.Fatalf("published inventory %+v; want two 143771 MiB GPUs", inv.GPUs)
	}
	// Both GPUs take pods while healthy; GPU 1 fails 8 s after the daemon
	// starts.
	if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("early", 100000, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	early := record(t, boundPod(t, client, "default", "early"))
	if got := early.Containers[0].GPUs[0].UUID; got != inv.GPUs[early.Containers[0].GPUs[0].Index].UUID {
		t.Errorf("early pod got GPU UUID %s, not the published one", got)
	}
	err = waitFor(30*time.Second, func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "h200-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		inv, err := gpusharev1.ParseInventory(n.Annotations[gpusharev1.InventoryAnnotation])
		return err == nil && !inv.GPUs[1].Healthy, err
	})
	if err != nil {
		t.Fatalf("the failed GPU was not published as unhealthy: %v", err)
	}
	t.Logf("GPU 1 failed and was published unhealthy %v after the daemon started", time.Since(start).Round(time.Second))
	// The daemon's metrics agree with the simulated GPUs.
	families := scrape(t, metricsURL)
	if total, err := metricSum(families, "gpushare_node_gpu_memory_total_bytes", nil); err != nil || total != 2*143771<<20 {
		t.Errorf("gpushare_node_gpu_memory_total_bytes sums to %v (%v); want two 143771 MiB GPUs", total, err)
	}
	for gpu, want := range map[string]float64{"0": 1, "1": 0} {
		if h, err := metricSum(families, "gpushare_node_gpu_healthy", map[string]string{"gpu": gpu}); err != nil || h != want {
			t.Errorf("gpushare_node_gpu_healthy{gpu=%s} = %v (%v), want %v", gpu, h, err, want)
		}
	}
	// With GPU 1 out, a second 100000 MiB pod fits nowhere if the first
	// took GPU 0, or only on GPU 0.
	if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("late", 100000, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if early.Containers[0].GPUs[0].Index == 0 {
		failedSchedulingMessage(t, client, "default", "late", "largest free share on any GPU is 43771 MiB, pod needs 100000 MiB")
		return
	}
	late := record(t, boundPod(t, client, "default", "late"))
	if late.Containers[0].GPUs[0].Index != 0 {
		t.Errorf("late pod landed on unhealthy GPU %d", late.Containers[0].GPUs[0].Index)
	}
}

// TestLoadAware: gpushare-node publishes live GPU use; under the load-aware
// policy a GPU with little booked but much memory really in use (here by a
// process outside Kubernetes) is not chosen first.
func TestLoadAware(t *testing.T) {
	t.Parallel()
	c, client, _ := startPlugin(t, schedulerConfigWith(t, "load-aware"))
	ctx := context.Background()
	bareNode(t, client, "t4-0")
	simFile := filepath.Join(t.TempDir(), "gpus.yaml")
	gpus := "gpus:\n- {model: Tesla T4, memoryMiB: 15360, count: 2}\n" +
		"usage:\n- {index: 0, usedMemoryMiB: 12288, utilizationPercent: 5, processes: [{pid: 4242, usedMemoryMiB: 12288}]}\n"
	if err := os.WriteFile(simFile, []byte(gpus), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run("gpushare-node", nodeBin(t), "--kubeconfig="+c.Kubeconfig, "--node-name=t4-0",
		"--simulated-gpus="+simFile, "--no-device-plugin", "--metrics-bind-address=", "--usage-interval=2s"); err != nil {
		t.Fatal(err)
	}
	err := waitFor(30*time.Second, func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "t4-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, inv := n.Annotations[gpusharev1.InventoryAnnotation]
		// Live use is on the daemon's lease (pkg/lease).
		l, err := client.CoordinationV1().Leases(gpusharev1.LeaseNamespace).Get(ctx, gpusharev1.LeasePrefix+"t4-0", metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not created yet
		}
		_, use := l.Annotations[gpusharev1.UsageAnnotation]
		return inv && use, nil
	})
	if err != nil {
		t.Fatalf("gpushare-node did not publish inventory and usage: %v", err)
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("small", 1024, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Binpack alone would take GPU 0 (equal bookings, lowest index).
	if got := record(t, boundPod(t, client, "default", "small")).Containers[0].GPUs[0].Index; got != 1 {
		t.Errorf("the pod got GPU %d; GPU 0 has 12 GiB in use outside the bookings, want GPU 1", got)
	}
}

// bareNode creates a kwok node with neither GPU inventory nor the opt-in
// label: gpushare-node adds both.
func bareNode(t testing.TB, client kubernetes.Interface, name string) {
	t.Helper()
	n, err := controlplane.NodeSpec{Name: name, Model: "unused", MemoryMiB: 1, Count: 1}.Node()
	if err != nil {
		t.Fatal(err)
	}
	delete(n.Labels, gpusharev1.NodeLabel)
	delete(n.Annotations, gpusharev1.InventoryAnnotation)
	if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// nodeBin builds gpushare-node once per test binary, into the directory
// TestMain removes. GPUSHARE_NODE_BIN names a gpushare-node to use
// instead, for comparing two builds under one test binary.
func nodeBin(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("GPUSHARE_NODE_BIN"); bin != "" {
		return bin
	}
	return commandBin(t, "gpushare-node")
}

// commandBin builds ./cmd/<name> once per test binary, into the
// directory TestMain removes, and returns its path.
func commandBin(t testing.TB, name string) string {
	t.Helper()
	binsMu.Lock()
	b := bins[name]
	if b == nil {
		b = &builtBin{}
		bins[name] = b
	}
	binsMu.Unlock()
	b.once.Do(func() {
		b.path = filepath.Join(binDir, name)
		build := exec.Command("go", "build", "-o", b.path, "./cmd/"+name)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %w\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

type builtBin struct {
	once sync.Once
	path string
	err  error
}

var (
	binsMu sync.Mutex
	bins   = map[string]*builtBin{}
)
