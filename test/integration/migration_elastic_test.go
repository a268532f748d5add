package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/controlplane"
	gpurecord "github.com/gpushare/gpushare/pkg/record"
)

// elasticPlaced returns a pod whose container "main" asks Elastic's
// resources (pairs of name without elasticgpu.io/ and amount), as the
// Elastic GPU Scheduler leaves it: bound to node, its annotations naming
// the container's GPUs.
func elasticPlaced(ns, name, node, gpus string, asks ...string) *corev1.Pod {
	r := corev1.ResourceList{}
	for i := 0; i < len(asks); i += 2 {
		r[corev1.ResourceName("elasticgpu.io/"+asks[i])] = k8sresource.MustParse(asks[i+1])
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
			gpurecord.ElasticAssumed: "true", gpurecord.ElasticContainerPrefix + "main": gpus}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: r, Requests: r}}}},
	}
}

// TestMigrationFromElastic: pods the Elastic GPU Scheduler placed (its
// annotations, bound directly) are booked where it recorded them when
// gpushare-scheduler starts, a share as asked and gpu-core 100 as the
// whole GPU, so new pods land only in what is left; and with the
// allocation policy a tenant can write none of Elastic's annotations.
func TestMigrationFromElastic(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	admin, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 15360, Count: 2})
	// GPU 0 holds 10240 MiB and 50%: 5120 MiB free; GPU 1 is whole.
	for _, p := range []*corev1.Pod{
		elasticPlaced("default", "old-share", "gpu-a", "0", "gpu-memory", "10240", "gpu-core", "50"),
		elasticPlaced("default", "old-whole", "gpu-a", "1", "gpu-core", "100"),
	} {
		if _, err := admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitRunning(t, admin, p.Namespace, p.Name)
	}
	sched, err := c.StartSchedulerAs(ctx, "gpushare-scheduler", schedulerBin, accountKubeconfig(t, c, "scheduler"),
		readFile(t, "deploy/scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	notForbidden(t, sched.Process)
	if err := controlplane.ApplyAllocationPolicy(ctx, admin, readFile(t, "deploy/allocation-policy.yaml")); err != nil {
		t.Fatal(err)
	}
	waitBooked(t, sched, "gpu-a", []float64{10240, 15360})
	if _, err := admin.CoreV1().Pods("default").Create(ctx, gpuPod("too-big", 5121, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, admin, "default", "too-big", "largest free share on any GPU is 5120 MiB, pod needs 5121 MiB")

	// A tenant can no longer place a pod with Elastic's record, nor add
	// one, under any container's name.
	tenant := tenantClient(t, c, admin, "tenant")
	forged := elasticPlaced("tenant", "forged", "gpu-a", "0", "gpu-memory", "1024")
	_, err = tenant.CoreV1().Pods("tenant").Create(ctx, forged, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "only gpushare's scheduler may set elasticgpu.io/assumed, elasticgpu.io/container-main") {
		t.Fatalf("a tenant created a pod with Elastic's record: %v", err)
	}
	plain := elasticPlaced("tenant", "plain", "", "0", "gpu-memory", "1024")
	plain.Annotations = nil
	plain.Spec.SchedulerName = "no-such-scheduler"
	if _, err := tenant.CoreV1().Pods("tenant").Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := `{"metadata":{"annotations":{"elasticgpu.io/container-other":"1"}}}`
	_, err = tenant.CoreV1().Pods("tenant").Patch(ctx, "plain", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "only gpushare's scheduler may set elasticgpu.io/container-other") {
		t.Fatalf("a tenant added Elastic's record to a pod: %v", err)
	}
}
