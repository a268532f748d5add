package integration

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/deviceplugin/kubelettest"
)

// TestNodeResources: the resources gpushare-node registers with the
// kubelet's own device manager, with the default resource model (the
// chart's), on the device-per-MiB route and with --hook-memory (the hook
// route): gpushare's, Aliyun's, Elastic's and KETI's resources and the
// hook, never nvidia.com/gpu, so that NVIDIA's device plugin on the same
// node would hand out the same GPUs under a name gpushare does not count
// (docs/install.md, "Beside other GPU software"). aliyun.com/gpu-mem has
// one device per GiB, or per MiB where a namespace counts it in MiB; then
// the hook route serves it in no devices (docs/install.md, "Moving over
// from Aliyun's gpushare", step 2).
func TestNodeResources(t *testing.T) {
	t.Parallel()
	perMiB := []string{"aliyun.com/gpu-count", "aliyun.com/gpu-mem", "elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory",
		"gpushare.io/gpu-core", "gpushare.io/gpu-count", "gpushare.io/gpu-hook", "gpushare.io/gpu-mem", "keti.com/mpsgpu"}
	hooked := slices.DeleteFunc(slices.Clone(perMiB), func(r string) bool {
		return r == "gpushare.io/gpu-mem" || r == "elasticgpu.io/gpu-memory"
	})
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	hookedMiB := slices.DeleteFunc(slices.Clone(hooked), func(r string) bool { return r == "aliyun.com/gpu-mem" })
	// The chart's GPUShareArgs with a namespace counting
	// aliyun.com/gpu-mem in MiB (docs/install.md, section 3).
	const mibArgs = "apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nresourceModel:\n  unitOverrides:\n" +
		"  - {name: aliyun.com/gpu-mem, unit: MiB, namespaces: [team-mib]}\n"
	for i, route := range []struct {
		name      string
		args      []string
		config    string
		want      []string
		aliyunMem int64
	}{
		{"one device per MiB", nil, "", perMiB, 2 * 15},
		{"hooks (--hook-memory)", []string{"--hook-memory"}, "", hooked, 2 * 15},
		{"aliyun.com/gpu-mem in MiB, one device per MiB", nil, mibArgs, perMiB, 2 * 15360},
		{"aliyun.com/gpu-mem in MiB, hooks", []string{"--hook-memory"}, mibArgs, hookedMiB, 0},
	} {
		node := "gpu-" + strconv.Itoa(i)
		bareNode(t, client, node)
		dir := socketDir(t)
		kubelet := kubelettest.Start(t, dir)
		sim := filepath.Join(dir, "gpus.yaml")
		if err := os.WriteFile(sim, []byte("gpus:\n- {model: Tesla T4, memoryMiB: 15360, count: 2}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if route.config != "" {
			config := filepath.Join(dir, "args.yaml")
			if err := os.WriteFile(config, []byte(route.config), 0o600); err != nil {
				t.Fatal(err)
			}
			route.args = append(route.args, "--config="+config)
		}
		port, err := controlplane.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.Run("gpushare-node-"+node, nodeBin(t), append([]string{"--kubeconfig=" + c.Kubeconfig, "--node-name=" + node,
			"--simulated-gpus=" + sim, "--device-plugin-dir=" + dir, "--pod-resources-socket=" + kubelet.PodResourcesSocket(),
			"--cdi-dir=" + filepath.Join(dir, "cdi"), "--metrics-bind-address=127.0.0.1:" + strconv.Itoa(port), "--usage-interval=0"},
			route.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		// gpushare-node publishes the GPUs once every plugin has
		// registered.
		err = waitFor(time.Minute, func() (bool, error) {
			n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			_, ok := n.Annotations[gpusharev1.InventoryAnnotation]
			return ok, nil
		})
		if err != nil {
			t.Fatalf("%s: gpushare-node did not publish the GPUs: %v\n%s", route.name, err, p.Tail(3000))
		}
		// The kubelet counts a plugin's devices when its first
		// ListAndWatch answer arrives, a moment after it registered.
		var names []string
		var capacity corev1.ResourceList
		_ = waitFor(30*time.Second, func() (bool, error) {
			capacity, _, _ = kubelet.Manager().GetCapacity(klog.Background())
			names = names[:0]
			for _, r := range slices.Sorted(maps.Keys(capacity)) {
				names = append(names, string(r))
			}
			return slices.Equal(names, route.want) && kubelet.Allocatable("aliyun.com/gpu-mem") == route.aliyunMem, nil
		})
		if !slices.Equal(names, route.want) {
			t.Errorf("%s: gpushare-node registered %v; want %v", route.name, names, route.want)
		}
		if _, ok := capacity["nvidia.com/gpu"]; ok {
			t.Errorf("%s: gpushare-node registered nvidia.com/gpu", route.name)
		}
		if got := kubelet.Allocatable("aliyun.com/gpu-mem"); got != route.aliyunMem {
			t.Errorf("%s: %d devices of aliyun.com/gpu-mem; want %d", route.name, got, route.aliyunMem)
		}
		p.Stop(10 * time.Second)
	}
}

// TestNvidiaGPUNotBooked: on a node whose GPUs NVIDIA's device plugin also
// advertises (nvidia.com/gpu), gpushare-scheduler places a pod that asks
// nvidia.com/gpu as a pod without GPUs: it gets no record and books
// nothing, and gpushare then books both GPUs in full for its own pods,
// one of them the GPU NVIDIA's plugin would have given that pod. It counts
// nvidia.com/gpu per node as kube-scheduler does: a third such pod on two
// GPUs waits.
func TestNvidiaGPUNotBooked(t *testing.T) {
	t.Parallel()
	_, client, sched := startPlugin(t, nil)
	ctx := context.Background()
	createNodes(t, client, controlplane.NodeSpec{Name: "t4", Model: "Tesla T4", MemoryMiB: 15360, Count: 2,
		Extended: map[corev1.ResourceName]int64{"nvidia.com/gpu": 2}})
	cuda := func(name string) *corev1.Pod {
		one := k8sresource.MustParse("1")
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": one}}}}}}
	}
	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(cuda("cuda-0"))
	if p := boundPod(t, client, "default", "cuda-0"); p.Annotations[gpusharev1.AllocationAnnotation] != "" {
		t.Errorf("a pod asking nvidia.com/gpu got a gpushare record: %s", p.Annotations[gpusharev1.AllocationAnnotation])
	}
	waitBooked(t, sched, "t4", []float64{0, 0})
	for _, name := range []string{"whole-0", "whole-1"} {
		create(gpuPod(name, 15360, 0))
		record(t, boundPod(t, client, "default", name))
	}
	waitBooked(t, sched, "t4", []float64{15360, 15360})
	create(cuda("cuda-1"))
	boundPod(t, client, "default", "cuda-1")
	create(cuda("cuda-2"))
	failedSchedulingMessage(t, client, "default", "cuda-2", "Insufficient nvidia.com/gpu")
}

// TestChartAliyunSpecsSecondScheduler: with the chart's default values
// (gpushare-scheduler a second scheduler, serving gpu-scheduler; the hook
// route on), an unchanged Aliyun pod, which names no schedulerName, stays
// with the cluster's kube-scheduler. On a node where gpushare-node's
// devices add up (aliyun.com/gpu-mem in GiB and the hooks, as the kubelet
// reports them) kube-scheduler binds it without a gpushare record, and
// gpushare-scheduler reports GPUNotAllocated on it. The same spec with
// schedulerName: gpu-scheduler is placed by gpushare, with its record
// (docs/install.md, "Beside other GPU software").
func TestChartAliyunSpecsSecondScheduler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := installChart(t)
	in.startNodeDaemons(t)
	in.startScheduler(t, in.pods(t, "scheduler")[0])
	// a100-0's kubelet, once gpushare-node registered its plugins: 4 x 80
	// GiB of aliyun.com/gpu-mem, and the hooks.
	kubeletCapacity(t, in.client, "a100-0", map[corev1.ResourceName]int64{"aliyun.com/gpu-mem": 320, gpusharev1.HookResource: 512})
	unchanged := aliyunPod("default", "unchanged", 2)
	if _, err := in.client.CoreV1().Pods("default").Create(ctx, unchanged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := boundPod(t, in.client, "default", "unchanged")
	if _, ok := p.Annotations[gpusharev1.AllocationAnnotation]; ok || p.Spec.NodeName != "a100-0" {
		t.Fatalf("the unchanged Aliyun pod went to %s with record %q; want kube-scheduler to bind it to a100-0, without one",
			p.Spec.NodeName, p.Annotations[gpusharev1.AllocationAnnotation])
	}
	eventNote(t, in.client, "default", "unchanged", "GPUNotAllocated", "without gpushare's gpushare.io/allocation record")
	named := aliyunPod("default", "named", 2)
	named.Spec.SchedulerName = "gpu-scheduler"
	if _, err := in.client.CoreV1().Pods("default").Create(ctx, named, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	record(t, boundPod(t, in.client, "default", "named"))
	in.checkNotForbidden(t)
}
