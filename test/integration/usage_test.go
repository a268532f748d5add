package integration

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// TestLiveUseOnLease: gpushare-node, with its least-privilege
// credentials, publishes live GPU use on its Lease and never on its Node;
// gpushare-scheduler's load-aware policy still sees it: a GPU with little
// booked but much memory really in use is not chosen first.
func TestLiveUseOnLease(t *testing.T) {
	t.Parallel()
	c, admin, _ := startPlugin(t, schedulerConfigWith(t, "load-aware"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := controlplane.Apply(ctx, admin, readFile(t, "deploy/node-rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-a", Bare: true})

	// Every version of the Node from now on.
	w, err := admin.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=gpu-a"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var updates, withUsage int
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			mu.Lock()
			if ev.Type == watch.Modified {
				updates++
			}
			if _, ok := n.Annotations[gpusharev1.UsageAnnotation]; ok {
				withUsage++
			}
			mu.Unlock()
		}
	}()
	defer func() { w.Stop(); <-watched }()

	kubeconfig, err := c.NodeDaemonKubeconfig(ctx, "gpu-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	simFile := filepath.Join(t.TempDir(), "gpus.yaml")
	gpus := "gpus:\n- {model: Tesla T4, memoryMiB: 15360, count: 2}\n" +
		"usage:\n- {index: 0, usedMemoryMiB: 12288, utilizationPercent: 5, processes: [{pid: 4242, usedMemoryMiB: 12288}]}\n"
	if err := os.WriteFile(simFile, []byte(gpus), 0o600); err != nil {
		t.Fatal(err)
	}
	daemon, err := c.Run("gpushare-node", nodeBin(t), "--kubeconfig="+kubeconfig, "--node-name=gpu-a",
		"--simulated-gpus="+simFile, "--no-device-plugin", "--metrics-bind-address=", "--usage-interval=1s",
		"--lease-duration=4s", "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	notForbidden(t, daemon)
	var onLease *gpusharev1.GPUUsage
	err = waitFor(30*time.Second, func() (bool, error) {
		l, err := admin.CoordinationV1().Leases(gpusharev1.LeaseNamespace).Get(ctx, gpusharev1.LeasePrefix+"gpu-a", metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not created yet
		}
		v, ok := l.Annotations[gpusharev1.UsageAnnotation]
		if !ok {
			return false, nil
		}
		onLease, err = gpusharev1.ParseUsage(v)
		return true, err
	})
	if err != nil {
		t.Fatalf("gpushare-node did not publish live use on its lease: %v", err)
	}
	if len(onLease.GPUs) != 2 || onLease.GPUs[0].UsedMemoryMiB != 12288 {
		t.Fatalf("lease carries %+v, want GPU 0 with 12288 MiB in use", onLease)
	}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, gpuPod("small", 1024, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Binpack alone would take GPU 0 (equal bookings, lowest index).
	if got := record(t, boundPod(t, admin, "default", "small")).Containers[0].GPUs[0].Index; got != 1 {
		t.Errorf("the pod got GPU %d; GPU 0 has 12 GiB in use outside the bookings, want GPU 1", got)
	}

	// Several usage intervals and lease renewals later, the Node still
	// holds no usage, and the daemon's writes of it stopped with the
	// inventory.
	mu.Lock()
	before := updates
	mu.Unlock()
	time.Sleep(5 * time.Second)
	n, err := admin.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := n.Annotations[gpusharev1.UsageAnnotation]; ok || withUsage > 0 {
		t.Errorf("live use was written on the Node (%d versions held it)", withUsage)
	}
	// Five 1-second samples would have been five Node updates; kwok may
	// touch the node's status once in a while.
	if d := updates - before; d > 1 {
		t.Errorf("the Node was updated %d times in 5 s of steady use", d)
	}
}
