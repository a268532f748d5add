package integration

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// TestPendingPodsDoNotSteer: a tenant creates 250 pods of one odd shape
// (half a GPU and 48 CPUs) that can never run (their nodeSelector matches
// no node). The 20 ordinary pods that follow land where they land on the
// same cluster without them: at most 2 of 20 placements change (the bound
// issue 30 set; pods that never bind are not learned, so none should).
func TestPendingPodsDoNotSteer(t *testing.T) {
	t.Parallel()
	baseline := steerRun(t, 0)
	steered := steerRun(t, 250)
	changed := 0
	for name, where := range baseline {
		if steered[name] != where {
			changed++
			t.Logf("%s: %s without the pending pods, %s with them", name, where, steered[name])
		}
	}
	if changed > 2 {
		t.Errorf("%d of %d placements changed with 250 pending pods, want at most 2", changed, len(baseline))
	}
}

// steerRun starts a cluster, creates pending pods that never run, then
// the ordinary pods one at a time, and returns where each landed (node
// and GPU indexes).
func steerRun(t *testing.T, pending int) map[string]string {
	t.Helper()
	c, client, _ := startPlugin(t, nil)
	defer c.Stop()
	ctx := context.Background()
	createNodes(t, client,
		controlplane.NodeSpec{Name: "h100-whole", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Count: 8, WholeCard: true},
		controlplane.NodeSpec{Name: "a100-0", Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Count: 4},
		controlplane.NodeSpec{Name: "t4-0", Model: "Tesla T4", MemoryMiB: 15360, Count: 4},
		controlplane.NodeSpec{Name: "t4-1", Model: "Tesla T4", MemoryMiB: 15360, Count: 4})
	q := func(v int64) k8sresource.Quantity { return *k8sresource.NewQuantity(v, k8sresource.DecimalSI) }
	pod := func(name string, limits corev1.ResourceList, cpu int64) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{SchedulerName: "gpu-scheduler", Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Limits: limits}}}},
		}
		if cpu > 0 {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: q(cpu)}
		}
		return p
	}
	for i := range pending {
		p := pod(fmt.Sprintf("odd-%03d", i), corev1.ResourceList{"gpushare.io/gpu-core": q(50)}, 48)
		p.Spec.NodeSelector = map[string]string{"no-such-pool": "x"}
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if pending > 0 {
		failedSchedulingMessage(t, client, "default", fmt.Sprintf("odd-%03d", pending-1), "didn't match Pod's node affinity/selector")
	}
	out := map[string]string{}
	for i := range 20 {
		var limits corev1.ResourceList
		switch i % 5 {
		case 0:
			limits = corev1.ResourceList{"gpushare.io/gpu-count": q(1)}
		case 1:
			limits = corev1.ResourceList{"gpushare.io/gpu-core": q(30), "gpushare.io/gpu-mem": q(4096)}
		default:
			limits = corev1.ResourceList{"gpushare.io/gpu-mem": q(int64(2048 * (i%4 + 1)))}
		}
		name := fmt.Sprintf("ordinary-%02d", i)
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod(name, limits, 2), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		out[name] = landed(t, client, name)
	}
	return out
}

// landed waits for the pod to be bound and returns its node and GPUs.
func landed(t *testing.T, client kubernetes.Interface, name string) string {
	t.Helper()
	a := record(t, boundPod(t, client, "default", name))
	s := a.Node
	for _, g := range a.Containers[0].GPUs {
		s += fmt.Sprintf("/%d", g.Index)
	}
	return s
}
