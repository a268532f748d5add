package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/plugin"
	gpurecord "github.com/gpushare/gpushare/pkg/record"
)

// aliyunPlaced returns a pod asking amount of aliyun.com/gpu-mem in one
// container, as Aliyun's gpushare extender leaves it: bound to node with
// its annotations naming GPU idx.
func aliyunPlaced(ns, name, node, idx string, amount int64) *corev1.Pod {
	p := aliyunPod(ns, name, amount)
	p.Spec.NodeName = node
	p.Annotations = map[string]string{gpurecord.AliyunIndex: idx, gpurecord.AliyunPod: strconv.FormatInt(amount, 10),
		"ALIYUN_COM_GPU_MEM_ASSIGNED": "true", "ALIYUN_COM_GPU_MEM_ASSUME_TIME": "1700000000000000000"}
	return p
}

// aliyunPod returns a pod asking amount of aliyun.com/gpu-mem in one
// container.
func aliyunPod(ns, name string, amount int64) *corev1.Pod {
	limits := corev1.ResourceList{"aliyun.com/gpu-mem": *k8sresource.NewQuantity(amount, k8sresource.DecimalSI)}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: limits}}}},
	}
}

// TestMigrationFromAliyun: a node still runs pods that Aliyun's gpushare
// placed (its annotations, bound directly) when gpushare-scheduler starts
// and the allocation policy is applied. gpushare books them where Aliyun
// recorded them, in their namespace's unit: new pods never land on a GPU
// they fill, a restart of the scheduler in the middle changes nothing, the
// old pods keep running untouched, a record naming a GPU the node lacks is
// reported, and a tenant can no longer write Aliyun's annotations.
// docs/install.md's cut-over itself, step by step in extender mode from
// the chart, is TestChartMigrationFromAliyun.
func TestMigrationFromAliyun(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	admin, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Two T4s of 15360 MiB (15 GiB).
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 15360, Count: 2})
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-mib"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What Aliyun left: GPU 0 holds 10 GiB + 3000 MiB (team-mib counts in
	// MiB) = 13240 MiB, 2120 free; GPU 1 holds 12 GiB = 12288 MiB, 3072
	// free. "lost" names a GPU the node does not have.
	old := []*corev1.Pod{
		aliyunPlaced("default", "old-0", "gpu-a", "0", 10),
		aliyunPlaced("team-mib", "old-mib", "gpu-a", "0", 3000),
		aliyunPlaced("default", "old-1", "gpu-a", "1", 12),
		aliyunPlaced("default", "lost", "gpu-a", "7", 1),
	}
	for _, p := range old {
		if _, err := admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	uids := map[string]types.UID{}
	for _, p := range old {
		got := waitRunning(t, admin, p.Namespace, p.Name)
		uids[p.Namespace+"/"+p.Name] = got.UID
	}

	config := readFile(t, "deploy/scheduler-config.yaml")
	sched, err := c.StartSchedulerAs(ctx, "gpushare-scheduler", schedulerBin, accountKubeconfig(t, c, "scheduler"), config)
	if err != nil {
		t.Fatal(err)
	}
	notForbidden(t, sched.Process)
	if err := controlplane.ApplyAllocationPolicy(ctx, admin, readFile(t, "deploy/allocation-policy.yaml")); err != nil {
		t.Fatal(err)
	}
	waitBooked(t, sched, "gpu-a", []float64{13240, 12288})
	eventNote(t, admin, "default", "lost", plugin.ReasonRecordRefused, "node gpu-a has no GPU 7")

	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// 3073 MiB fits no GPU; 3072 MiB only GPU 1.
	create(gpuPod("too-big", 3073, 0))
	failedSchedulingMessage(t, admin, "default", "too-big", "largest free share on any GPU is 3072 MiB, pod needs 3073 MiB")
	create(gpuPod("fits-1", 3072, 0))
	if g := record(t, boundPod(t, admin, "default", "fits-1")).Containers[0].GPUs[0].Index; g != 1 {
		t.Fatalf("fits-1 landed on GPU %d, want 1 (GPU 0 has 2120 MiB free)", g)
	}

	// A restart in the middle: the new scheduler books the same.
	sched.Stop(10 * time.Second)
	sched, err = c.StartSchedulerAs(ctx, "gpushare-scheduler-2", schedulerBin, accountKubeconfig(t, c, "scheduler"), config)
	if err != nil {
		t.Fatal(err)
	}
	notForbidden(t, sched.Process)
	waitBooked(t, sched, "gpu-a", []float64{13240, 15360})
	// 3 GiB fits nowhere now; 2 GiB (2048 MiB) only on GPU 0, and gets
	// Aliyun's annotations from gpushare.
	create(aliyunPod("default", "three-gib", 3))
	failedSchedulingMessage(t, admin, "default", "three-gib", "largest free share on any GPU is 2120 MiB, pod needs 3072 MiB")
	create(aliyunPod("default", "two-gib", 2))
	two := boundPod(t, admin, "default", "two-gib")
	if g := record(t, two).Containers[0].GPUs[0].Index; g != 0 || two.Annotations[gpurecord.AliyunIndex] != "0" {
		t.Fatalf("two-gib landed on GPU %d (%s=%q), want 0", g, gpurecord.AliyunIndex, two.Annotations[gpurecord.AliyunIndex])
	}
	waitBooked(t, sched, "gpu-a", []float64{15288, 15360})

	// The old pods run on, as Aliyun left them.
	for _, p := range old {
		got, err := admin.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.UID != uids[p.Namespace+"/"+p.Name] || got.Status.Phase != corev1.PodRunning ||
			got.Annotations[gpurecord.AliyunIndex] != p.Annotations[gpurecord.AliyunIndex] {
			t.Errorf("old pod %s/%s: UID %s, phase %s, %s=%q; want it running untouched", p.Namespace, p.Name,
				got.UID, got.Status.Phase, gpurecord.AliyunIndex, got.Annotations[gpurecord.AliyunIndex])
		}
	}

	// A tenant can no longer place a pod with Aliyun's record, nor edit one.
	tenant := tenantClient(t, c, admin, "tenant")
	forged := aliyunPlaced("tenant", "forged", "gpu-a", "1", 1)
	_, err = tenant.CoreV1().Pods("tenant").Create(ctx, forged, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "only gpushare's scheduler may set ALIYUN_COM_GPU_MEM_IDX, ALIYUN_COM_GPU_MEM_POD") {
		t.Fatalf("a tenant created a pod with Aliyun's record: %v", err)
	}
	plain := aliyunPod("tenant", "plain", 1)
	plain.Spec.SchedulerName = "no-such-scheduler"
	if _, err := tenant.CoreV1().Pods("tenant").Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := `{"metadata":{"annotations":{"ALIYUN_COM_GPU_MEM_IDX":"1"}}}`
	_, err = tenant.CoreV1().Pods("tenant").Patch(ctx, "plain", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "only gpushare's scheduler may set ALIYUN_COM_GPU_MEM_IDX") {
		t.Fatalf("a tenant added Aliyun's record to a pod: %v", err)
	}
}
