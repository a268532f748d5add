package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/plugin"
)

// TestUnfitMessages: with one of h100-0's 8 GPUs withdrawn (unhealthy),
// an 8-GPU pod is told the most healthy GPUs any node has is 7, not the
// 4 of the smaller node; and since no eviction could make room for it,
// kube-scheduler's preemption leaves every node alone ("not helpful")
// instead of looking for victims on each retry. A pod that evictions
// could place is still tried by preemption.
func TestUnfitMessages(t *testing.T) {
	t.Parallel()
	_, client, _ := startPlugin(t, nil)
	ctx := context.Background()
	createNodes(t, client,
		controlplane.NodeSpec{Name: "h100-0", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Count: 8},
		controlplane.NodeSpec{Name: "a100-0", Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Count: 4})
	withdraw(t, client, "h100-0", 7)

	whole := func(name string, count int64) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{SchedulerName: "gpu-scheduler", Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					"gpushare.io/gpu-count": *k8sresource.NewQuantity(count, k8sresource.DecimalSI)}}}}},
		}
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, whole("eight", 8), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	msg := failedSchedulingMessage(t, client, "default", "eight", "a container needs 8 GPUs, the most healthy GPUs any node has is 7")
	if !containsAll(msg, "preemption:", "Preemption is not helpful for scheduling") {
		t.Errorf("FailedScheduling %q: want preemption to find no node worth trying", msg)
	}

	// Seven whole GPUs fit h100-0; once they are taken, another pod of
	// seven could fit only by evicting them: preemption looks for
	// victims there (and finds none of lower priority).
	if _, err := client.CoreV1().Pods("default").Create(ctx, whole("seven", 7), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	boundPod(t, client, "default", "seven")
	if _, err := client.CoreV1().Pods("default").Create(ctx, whole("seven-more", 7), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	msg = failedSchedulingMessage(t, client, "default", "seven-more", "preemption:")
	if !containsAll(msg, "No preemption victims found") {
		t.Errorf("FailedScheduling %q: want preemption to have looked for victims on h100-0", msg)
	}
}

// withdraw marks GPU gpu of node unhealthy in its published inventory,
// as its node daemon does after an XID error.
func withdraw(t *testing.T, client kubernetes.Interface, node string, gpu int) {
	t.Helper()
	ctx := context.Background()
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := gpusharev1.ParseInventory(n.Annotations[gpusharev1.InventoryAnnotation])
	if err != nil {
		t.Fatal(err)
	}
	inv.GPUs[gpu].Healthy = false
	value, err := gpusharev1.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[gpusharev1.InventoryAnnotation] = value
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestPinnedPodWithoutRecord: a pod that asks for a GPU and is pinned to
// a gpushare node with spec.nodeName runs with no record: the scheduler
// says so in an event (once), and `kubectl inspect gpushare pod` says it
// holds no GPU. A pinned pod that asks for none gets no such event.
func TestPinnedPodWithoutRecord(t *testing.T) {
	t.Parallel()
	c, client, _ := startPlugin(t, nil)
	ctx := context.Background()
	createNodes(t, client, controlplane.NodeSpec{Name: "t4", Model: "Tesla T4", MemoryMiB: 15360, Count: 1})
	pinned := gpuPod("pinned", 1024, 0)
	pinned.Spec.NodeName = "t4"
	plain := gpuPod("plain", 0, 0)
	plain.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	plain.Spec.NodeName = "t4"
	for _, p := range []*corev1.Pod{plain, pinned} {
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventNote(t, client, "default", "pinned", plugin.ReasonNoRecord, "bound to node t4 without gpushare's gpushare.io/allocation record")
	view := string(inspectCmd(t, c.Kubeconfig, "pod", "-n", "default", "pinned"))
	if !strings.Contains(view, "Record:     none: the pod holds no GPU") {
		t.Errorf("the pod view does not say the pod holds no GPU:\n%s", view)
	}
	evs, err := client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Regarding.Name == "plain" && e.Reason == plugin.ReasonNoRecord {
			t.Errorf("a pod that asks for no GPU got %s: %s", e.Reason, e.Note)
		}
	}
}
