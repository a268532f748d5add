package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// TestRequeue: a pod waiting for GPUs is retried as soon as a pod holding
// them is deleted or ends, not at the next unrelated event; a pod whose
// request is invalid is not re-evaluated on every node event.
func TestRequeue(t *testing.T) {
	t.Parallel()
	_, client, sched := startPlugin(t, nil)
	ctx := context.Background()
	node := controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 15360, Count: 1}
	createNodes(t, client, node)

	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// waits binds name within 10 s after what frees its GPU: kube-scheduler
	// retries unschedulable pods on its own only after 5 minutes, or
	// within 10 s of backoff when an event requeues them.
	waits := func(name string, free func()) {
		t.Helper()
		create(gpuPod(name, 15360, 0))
		failedSchedulingMessage(t, client, "default", name, "InsufficientGPUMemory")
		start := time.Now()
		free()
		err := waitFor(20*time.Second, func() (bool, error) {
			p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Spec.NodeName != "", err
		})
		if err != nil {
			t.Fatalf("pod %s was not bound within 20 s of its GPU being freed: %v", name, err)
		}
		t.Logf("pod %s bound %v after its GPU was freed", name, time.Since(start).Round(time.Millisecond))
	}

	create(gpuPod("holder", 15360, 0))
	boundPod(t, client, "default", "holder")
	waits("after-delete", func() {
		if err := client.CoreV1().Pods("default").Delete(ctx, "holder", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	waits("after-end", func() {
		p, err := client.CoreV1().Pods("default").Get(ctx, "after-delete", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The pod's containers exit: kwok leaves a pod it did not
		// end alone once it has a final phase.
		p.Status.Phase = corev1.PodSucceeded
		if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	// An invalid pod: 150% of a GPU strands half of one.
	invalid := gpuPod("invalid", 0, 0)
	invalid.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-core": *k8sresource.NewQuantity(150, k8sresource.DecimalSI)}
	create(invalid)
	failedSchedulingMessage(t, client, "default", "invalid", "150 is above 100")
	// A GPU init container with no GPU container after it could not be
	// served on the node: refused with the reason.
	initOnly := gpuPod("init-only", 1024, 0)
	initOnly.Spec.InitContainers = initOnly.Spec.Containers
	initOnly.Spec.Containers = []corev1.Container{{Name: "app", Image: "busybox"}}
	create(initOnly)
	failedSchedulingMessage(t, client, "default", "init-only", "no app or sidecar container after it")
	before := invalidDecisions(t, sched)
	// Ten inventory changes, each a node event the plugin registers for.
	inv := node.Inventory()
	for i := range 10 {
		inv.GPUs[0].Healthy = i%2 == 1
		value, err := gpusharev1.Marshal(inv)
		if err != nil {
			t.Fatal(err)
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, gpusharev1.InventoryAnnotation, value)
		if _, err := client.CoreV1().Nodes().Patch(ctx, "gpu-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if after := invalidDecisions(t, sched); after-before > 1 {
		t.Errorf("the invalid pod was evaluated %v more times over 10 node events, want at most 1", after-before)
	}
	// The API server publishes its client CA, so the scheduler does not
	// complain that it cannot find it.
	for _, line := range strings.Split(sched.Tail(1<<20), "\n") {
		if strings.Contains(line, "extension-apiserver-authentication") && (line[0] == 'E' || line[0] == 'W') {
			t.Errorf("the scheduler complains about extension-apiserver-authentication: %s", line)
		}
	}
}

func invalidDecisions(t *testing.T, s *controlplane.Scheduler) float64 {
	t.Helper()
	v, err := metricSum(scrape(t, s.URL+"/metrics"), "gpushare_scheduler_decisions_total", map[string]string{"result": "invalid"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}
