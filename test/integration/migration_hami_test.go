package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/plugin"
	gpurecord "github.com/gpushare/gpushare/pkg/record"
)

// hamiSchedulerConfig is deploy/scheduler-config.yaml with HAMi's
// resource names added to the resource model (examples/hami/values.yaml
// says the same to the chart), and left to gpushare by NodeResourcesFit.
func hamiSchedulerConfig(t *testing.T) []byte {
	t.Helper()
	config := string(readFile(t, "deploy/scheduler-config.yaml"))
	overrides := "        unitOverrides:\n        - {name: aliyun.com/gpu-mem, unit: MiB, namespaces: [team-mib]}\n"
	resources := "        resources:\n"
	for _, r := range []string{"gpushare.io/gpu-mem Memory MiB", "gpushare.io/gpu-core Compute", "gpushare.io/gpu-count Count",
		"aliyun.com/gpu-mem Memory GiB", "aliyun.com/gpu-count Count", "elasticgpu.io/gpu-memory Memory MiB",
		"elasticgpu.io/gpu-core Compute", "keti.com/mpsgpu MPS", "nvidia.com/gpu Count", "nvidia.com/gpumem MemoryPerGPU MiB",
		"nvidia.com/gpumem-percentage MemoryPercent", "nvidia.com/gpucores ComputePerGPU"} {
		f := strings.Fields(r)
		resources += fmt.Sprintf("        - {name: %s, kind: %s", f[0], f[1])
		if len(f) == 3 {
			resources += ", unit: " + f[2]
		}
		resources += "}\n"
	}
	groups := "ignoredResourceGroups: [gpushare.io, aliyun.com, elasticgpu.io, keti.com]"
	if strings.Count(config, overrides) != 2 || strings.Count(config, groups) != 2 {
		t.Fatalf("deploy/scheduler-config.yaml changed: update hamiSchedulerConfig")
	}
	config = strings.ReplaceAll(config, overrides, resources)
	config = strings.ReplaceAll(config, groups, "ignoredResourceGroups: [gpushare.io, aliyun.com, elasticgpu.io, keti.com, nvidia.com]")
	return []byte(config)
}

// hamiPlaced returns a pod whose container "main" asks HAMi's resources
// (pairs of name without nvidia.com/ and amount), as HAMi leaves it:
// bound to node, its GPUs in HAMi's annotations.
func hamiPlaced(ns, name, node, allocated string, asks ...string) *corev1.Pod {
	r := corev1.ResourceList{}
	for i := 0; i < len(asks); i += 2 {
		r[corev1.ResourceName("nvidia.com/"+asks[i])] = k8sresource.MustParse(asks[i+1])
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
			gpurecord.HAMiNode: node, gpurecord.HAMiAllocated: allocated, gpurecord.HAMiToAllocate: ";;",
			"hami.io/bind-phase": "success", "hami.io/bind-time": "1764230000"}},
		Spec: corev1.PodSpec{NodeName: node, SchedulerName: "hami-scheduler", Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: r}}}},
	}
}

// TestMigrationFromHAMi: pods HAMi placed (its annotations, bound
// directly) keep their GPUs when gpushare-scheduler starts and after it
// restarts, so new pods land only in what is left; HAMi's example pods,
// unchanged, are placed by gpushare with records; and with the
// allocation policy a tenant can neither write HAMi's record nor change
// the GPUs a bound pod picked.
func TestMigrationFromHAMi(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	admin, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-h", Model: "Tesla T4", MemoryMiB: 15360, Count: 3})
	// GPU 0 holds 10240 MiB and 50% (5120 MiB free), GPU 1 half its
	// memory (7680 free), GPU 2 is whole; "lost" names no GPU of the node.
	old := []*corev1.Pod{
		hamiPlaced("default", "old-share", "gpu-h", "GPU-gpu-h-0,NVIDIA,10240,50:;", "gpu", "1", "gpumem", "10240", "gpucores", "50"),
		hamiPlaced("default", "old-percent", "gpu-h", "GPU-gpu-h-1,NVIDIA,7680,0:;", "gpu", "1", "gpumem-percentage", "50"),
		hamiPlaced("default", "old-whole", "gpu-h", "GPU-gpu-h-2,NVIDIA,15360,100:;", "gpu", "1"),
		hamiPlaced("default", "lost", "gpu-h", "GPU-gone,NVIDIA,1000,0:;", "gpu", "1", "gpumem", "1000"),
	}
	for _, p := range old {
		if _, err := admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitRunning(t, admin, p.Namespace, p.Name)
	}
	config := hamiSchedulerConfig(t)
	sched, err := c.StartSchedulerAs(ctx, "gpushare-scheduler", schedulerBin, accountKubeconfig(t, c, "scheduler"), config)
	if err != nil {
		t.Fatal(err)
	}
	notForbidden(t, sched.Process)
	if err := controlplane.ApplyAllocationPolicy(ctx, admin, readFile(t, "deploy/allocation-policy.yaml")); err != nil {
		t.Fatal(err)
	}
	waitBooked(t, sched, "gpu-h", []float64{10240, 7680, 15360})
	eventNote(t, admin, "default", "lost", plugin.ReasonRecordRefused, "node gpu-h has no GPU GPU-gone")

	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// HAMi's names through gpushare: 7681 MiB fits no GPU, 6000 only GPU 1.
	newPod := func(name, mib string) *corev1.Pod {
		p := hamiPlaced("default", name, "", "", "gpu", "1", "gpumem", mib)
		p.Annotations, p.Spec.SchedulerName = nil, ""
		return p
	}
	create(newPod("too-big", "7681"))
	failedSchedulingMessage(t, admin, "default", "too-big", "largest free share on any GPU is 7680 MiB, pod needs 7681 MiB")
	create(newPod("fits-1", "6000"))
	if g := record(t, boundPod(t, admin, "default", "fits-1")).Containers[0].GPUs[0].Index; g != 1 {
		t.Fatalf("fits-1 landed on GPU %d, want 1 (GPU 0 has 5120 MiB free)", g)
	}
	// A restart: the new scheduler books the same.
	sched.Stop(10 * time.Second)
	sched, err = c.StartSchedulerAs(ctx, "gpushare-scheduler-2", schedulerBin, accountKubeconfig(t, c, "scheduler"), config)
	if err != nil {
		t.Fatal(err)
	}
	notForbidden(t, sched.Process)
	waitBooked(t, sched, "gpu-h", []float64{10240, 13680, 15360})
	create(newPod("after-restart", "5121"))
	failedSchedulingMessage(t, admin, "default", "after-restart", "largest free share on any GPU is 5120 MiB, pod needs 5121 MiB")

	// The tenant: no HAMi record on a new pod, no changing a bound pod's
	// GPU choice.
	tenant := tenantClient(t, c, admin, "tenant")
	forged := hamiPlaced("tenant", "forged", "gpu-h", "GPU-gpu-h-2,NVIDIA,1000,0:;", "gpu", "1", "gpumem", "1000")
	_, err = tenant.CoreV1().Pods("tenant").Create(ctx, forged, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "only gpushare's scheduler may set hami.io/vgpu-node, hami.io/vgpu-devices-allocated") {
		t.Fatalf("a tenant created a pod with HAMi's record: %v", err)
	}
	mine := newPod("mine", "1000")
	mine.Namespace = "tenant"
	mine.Annotations = map[string]string{"nvidia.com/use-gpuuuid": "GPU-gpu-h-0,GPU-gpu-h-1"}
	if _, err := tenant.CoreV1().Pods("tenant").Create(ctx, mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	boundPod(t, admin, "tenant", "mine")
	patch := `{"metadata":{"annotations":{"nvidia.com/use-gpuuuid":"GPU-gpu-h-2"}}}`
	_, err = tenant.CoreV1().Pods("tenant").Patch(ctx, "mine", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "nvidia.com/use-gpuuuid shapes the pod's GPU request and cannot change once the pod is bound") {
		t.Fatalf("a tenant changed a bound pod's GPU choice: %v", err)
	}

	hamiExamples(t, admin)
}

// hamiExamples places HAMi's example pods (examples/hami/pods), unchanged, on
// two more nodes and checks each record: as many GPUs as the pod asks,
// of the type it picks, each with the share it asks; the pod that names
// GPUs no node has waits and says why.
func hamiExamples(t *testing.T, admin kubernetes.Interface) {
	ctx := context.Background()
	createNodes(t, admin, controlplane.NodeSpec{Name: "hami-a", Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Count: 8},
		controlplane.NodeSpec{Name: "hami-b", Model: "Tesla T4", MemoryMiB: 15360, Count: 6})
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hami"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "examples", "hami", "pods", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("examples/hami/pods: %v, %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p corev1.Pod
		if err := yaml.UnmarshalStrict(b, &p); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := admin.CoreV1().Pods("hami").Create(ctx, &p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	failedSchedulingMessage(t, admin, "hami", "specify-uuid-to-use",
		"the pod's annotations exclude every GPU (use-gpuuuid GPU-03f69c50-207a-2038-9b45-23cac89cb67d,GPU-03f69c50-207a-2038-9b45-23cac89cb67e)")
	gpuMiB := map[string]int64{"hami-a": 40960, "hami-b": 15360}
	// Per pod: GPUs, then the MiB (a negative number: that percent of the
	// GPU; 0: the whole GPU) and compute of each.
	want := map[string][3]int64{
		"default-use":               {1, 3000, 30},
		"use-memory-fraction":       {2, -50, 30},
		"use-exclusive-card":        {2, 0, 100},
		"use-as-normal":             {1, 0, 100},
		"specify-card-type-to-use":  {2, 0, 100},
		"specify-card-type-not-use": {2, 0, 100},
		"specify-uuid-not-use":      {2, 0, 100},
		"specify-scheduling-policy": {1, 0, 100},
		"use-sharing-card-1":        {1, -40, 60},
		"use-sharing-card-2":        {1, -60, 40},
	}
	for name, w := range want {
		p := boundPod(t, admin, "hami", name)
		a := record(t, p)
		if len(a.Containers) != 1 || len(a.Containers[0].GPUs) != int(w[0]) {
			t.Errorf("%s: record %+v, want %d GPUs", name, a, w[0])
			continue
		}
		node := p.Spec.NodeName
		mib := w[1]
		switch {
		case mib == 0:
			mib = gpuMiB[node]
		case mib < 0:
			mib = gpuMiB[node] * -mib / 100
		}
		for _, g := range a.Containers[0].GPUs {
			if g.MemoryMiB != mib || g.Compute != w[2] {
				t.Errorf("%s on %s: GPU %d books %d MiB %d%%, want %d MiB %d%%", name, node, g.Index, g.MemoryMiB, g.Compute, mib, w[2])
			}
		}
		if name == "specify-card-type-to-use" && node != "hami-a" {
			t.Errorf("%s landed on %s, which has no A100 or V100", name, node)
		}
	}
}
