package deviceplugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/gpu/sim"
	"github.com/gpushare/gpushare/pkg/resource"
)

// aliyunMemory is the resource as Aliyun's pod specs write it.
const aliyunMemory corev1.ResourceName = "aliyun.com/gpu-mem"

func TestAliyunEnvInContainer(t *testing.T) {
	cfg := &v1alpha1.ResourceModel{UnitOverrides: []v1alpha1.UnitOverride{
		{Name: aliyunMemory, Unit: v1alpha1.MiB, Namespaces: []string{"mib"}}}}
	model, err := resource.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := sim.New(&sim.Config{GPUs: []sim.Group{{Model: "Tesla T4", MemoryMiB: 15360, Count: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, func(c *testConfig) {
		c.Backend, c.Resources, c.Claims.Requests, c.Claims.UnitMiB = gpus, ResourcesFrom(cfg), model.PodRequest, model.UnitMiB
	})
	gib := n.pod("gib", share{resource: string(aliyunMemory), amount: 3, container: "main", kind: gpusharev1.ContainerApp, gpu: 1, mib: 3072})
	mib := n.pod("mib", share{resource: string(aliyunMemory), amount: 3500, container: "main", kind: gpusharev1.ContainerApp, gpu: 0, mib: 3500})
	mib.Namespace = "mib"
	other := n.pod("other", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 0, mib: 3072})
	for _, tc := range []struct {
		pod  *corev1.Pod
		want map[string]string
	}{
		{gib, map[string]string{"ALIYUN_COM_GPU_MEM_IDX": "1", "ALIYUN_COM_GPU_MEM_CONTAINER": "3", "ALIYUN_COM_GPU_MEM_DEV": "15", "ALIYUN_COM_GPU_MEM_POD": "3"}},
		{mib, map[string]string{"ALIYUN_COM_GPU_MEM_IDX": "0", "ALIYUN_COM_GPU_MEM_CONTAINER": "3500", "ALIYUN_COM_GPU_MEM_DEV": "15360", "ALIYUN_COM_GPU_MEM_POD": "3500"}},
		{other, map[string]string{}},
	} {
		if err := n.admit(tc.pod); err != nil {
			t.Fatalf("admitting %s: %v", tc.pod.Name, err)
		}
		env, err := n.start(tc.pod, "main")
		if err != nil {
			t.Fatalf("starting %s: %v", tc.pod.Name, err)
		}
		got := map[string]string{}
		for k, v := range env {
			if strings.HasPrefix(k, "ALIYUN_") {
				got[k] = v
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("pod %s/%s: Aliyun environment (-want,+got):\n%s", tc.pod.Namespace, tc.pod.Name, diff)
		}
	}
}

// A pod Aliyun's gpushare placed (its record only, no gpushare record)
// gets the GPU Aliyun recorded when its container starts, and again after
// a kubelet restart; a record naming a GPU the node lacks starts nothing.
func TestAliyunPlacedPodKeepsItsGPU(t *testing.T) {
	model, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := sim.New(&sim.Config{GPUs: []sim.Group{{Model: "Tesla T4", MemoryMiB: 15360, Count: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, func(c *testConfig) {
		c.Backend, c.Resources, c.Claims.Requests, c.Claims.UnitMiB = gpus, ResourcesFrom(v1alpha1.Default()), model.PodRequest, model.UnitMiB
	})
	aliyunPlaced := func(name, idx string) *corev1.Pod {
		p := n.pod(name, share{resource: string(aliyunMemory), amount: 3, container: "main", kind: gpusharev1.ContainerApp, gpu: 1, mib: 3072})
		p.Annotations = map[string]string{"ALIYUN_COM_GPU_MEM_IDX": idx, "ALIYUN_COM_GPU_MEM_POD": "3",
			"ALIYUN_COM_GPU_MEM_ASSIGNED": "true", "ALIYUN_COM_GPU_MEM_ASSUME_TIME": "1700000000000000000"}
		return p
	}
	old := aliyunPlaced("old", "1")
	if err := n.admit(old); err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"first start", "after a kubelet restart"} {
		if when != "first start" {
			n.Restart()
			n.WaitAllocatable(string(aliyunMemory), 2*15)
		}
		env, err := n.start(old, "main")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(1) || env["ALIYUN_COM_GPU_MEM_IDX"] != "1" {
			t.Errorf("%s: sees %q (IDX %q), want GPU 1", when, env["NVIDIA_VISIBLE_DEVICES"], env["ALIYUN_COM_GPU_MEM_IDX"])
		}
	}
	lost := aliyunPlaced("lost", "5")
	if err := n.admit(lost); err != nil {
		t.Fatal(err)
	}
	if _, err := n.start(lost, "main"); err == nil || !strings.Contains(err.Error(), "has no GPU 5") {
		t.Fatalf("a record naming GPU 5 of 2: %v", err)
	}
}
