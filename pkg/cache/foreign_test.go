package cache_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

// aliyunPod is a running pod in namespace ns, bound to node, whose app
// containers ask amounts of aliyun.com/gpu-mem, with the annotations
// Aliyun's extender writes (idx, and pod unless empty).
func aliyunPod(uid, ns, node, idx, pod string, amounts ...int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod-" + uid, UID: types.UID(uid),
			Annotations: map[string]string{record.AliyunIndex: idx}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if pod != "" {
		p.Annotations[record.AliyunPod] = pod
	}
	for i, a := range amounts {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: []string{"main", "side"}[i],
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				"aliyun.com/gpu-mem": *k8sresource.NewQuantity(a, k8sresource.DecimalSI)}}})
	}
	return p
}

func aliyunCache(t *testing.T) (*cache.Cache, *[]string) {
	t.Helper()
	cfg := v1alpha1.Default()
	cfg.UnitOverrides = []v1alpha1.UnitOverride{{Name: "aliyun.com/gpu-mem", Unit: v1alpha1.MiB, Namespaces: []string{"mib"}}}
	model, err := resource.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	r := &logRecorder{}
	c := cache.New(r.logger(), cache.Options{Requests: model.PodRequest, RequestAnnotations: func(*corev1.Pod) []string { return model.RequestAnnotations() },
		Refused: func(p *corev1.Pod, err error) {
			refused = append(refused, p.Name+": "+err.Error())
		}})
	return c, &refused
}

// Pods Aliyun's extender placed book their GPU by its index, in the unit
// of their namespace.
func TestAliyunRecordsBook(t *testing.T) {
	c, refused := aliyunCache(t)
	c.SetNode(gpuNode(t, "n1", 15360, 15360))
	// 3 + 2 GiB on GPU 1: 5120 MiB; 3500 MiB (a MiB namespace) on GPU 0.
	c.SetPod(aliyunPod("a", "default", "n1", "1", "5", 3, 2))
	c.SetPod(aliyunPod("b", "mib", "n1", "0", "3500", 3500))
	want := []alloc.Usage{{MemoryMiB: 3500}, {MemoryMiB: 5120}}
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Fatalf("booked %v, want %v (-want +got):\n%s", got, want, cmp.Diff(want, got))
	}
	if len(*refused) != 0 {
		t.Fatalf("refused %q", *refused)
	}
	// Renumbered? No: Aliyun named GPUs by index; a new inventory books
	// them again by index.
	c.SetNode(gpuNode(t, "n1", 15360, 15360))
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Fatalf("after the inventory again: %v, want %v", got, want)
	}
	// The pod ends: its GPU is free.
	done := aliyunPod("a", "default", "n1", "1", "5", 3, 2)
	done.Status.Phase = corev1.PodSucceeded
	c.SetPod(done)
	if got := usage(t, c, "n1"); !cmp.Equal(got, []alloc.Usage{{MemoryMiB: 3500}, {}}) {
		t.Fatalf("after the pod ended: %v", got)
	}
}

// Aliyun's placement read none of gpushare's request-shaping annotations:
// a GPU models annotation added later (here one the node's GPU is not)
// does not unbook the pod, in a cache that meets it so.
func TestAliyunRecordIgnoresGPUShareAnnotations(t *testing.T) {
	c, refused := aliyunCache(t)
	c.SetNode(gpuNode(t, "n1", 15360))
	p := aliyunPod("a", "default", "n1", "0", "3", 3)
	p.Annotations["gpushare.io/gpu-models"] = "NVIDIA H100 80GB HBM3"
	c.SetPod(p)
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 3072}}; !cmp.Equal(got, want) {
		t.Fatalf("booked %v, want %v", got, want)
	}
	if len(*refused) != 0 {
		t.Fatalf("refused %q", *refused)
	}
}

// A pod that also has gpushare's record is booked by gpushare's.
func TestOwnRecordBeforeAliyun(t *testing.T) {
	c, refused := aliyunCache(t)
	c.SetNode(gpuNode(t, "n1", 15360, 15360))
	p := aliyunPod("a", "default", "n1", "1", "3", 3)
	value, err := gpusharev1.Marshal(&gpusharev1.Allocation{Node: "n1", Containers: []gpusharev1.ContainerAllocation{{
		Name: "main", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{share("n1", 0, 3072, 0)}}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[gpusharev1.AllocationAnnotation] = value
	c.SetPod(p)
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 3072}, {}}; !cmp.Equal(got, want) {
		t.Fatalf("booked %v, want gpushare's record %v", got, want)
	}
	if len(*refused) != 0 {
		t.Fatalf("refused %q", *refused)
	}
}

// Records that cannot be what Aliyun placed book nothing and are
// reported; one that over-commits its GPU is held and reported.
func TestAliyunRecordsRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want string
		// held: GPU 0 is held full afterwards.
		held bool
	}{
		"not bound":            {pod: aliyunPod("a", "default", "", "0", "3", 3), want: "not bound"},
		"no such GPU":          {pod: aliyunPod("a", "default", "n1", "2", "3", 3), want: "node n1 has no GPU 2"},
		"not an index":         {pod: aliyunPod("a", "default", "n1", "zero", "3", 3), want: `"zero" is not one GPU index`},
		"several GPUs":         {pod: aliyunPod("a", "default", "n1", "0,1", "3", 3), want: "is not one GPU index"},
		"amount not the pod's": {pod: aliyunPod("a", "default", "n1", "0", "4", 3), want: `ALIYUN_COM_GPU_MEM_POD="4", the pod's containers ask 3`},
		"asks no aliyun.com":   {pod: aliyunPod("a", "default", "n1", "0", ""), want: "asks no aliyun.com/gpu-mem"},
		// 20 GiB on a GPU of 15 GiB: held full, and said.
		"more than the GPU": {pod: aliyunPod("a", "default", "n1", "0", "20", 20), want: "over-commits its GPU", held: true},
	} {
		t.Run(name, func(t *testing.T) {
			c, refused := aliyunCache(t)
			c.SetNode(gpuNode(t, "n1", 15360, 15360))
			c.SetPod(tc.pod)
			c.SetPod(tc.pod)
			if len(*refused) != 1 || !strings.Contains((*refused)[0], tc.want) || !strings.Contains((*refused)[0], "placement record of Aliyun's gpushare") {
				t.Fatalf("reported %q, want once %q", *refused, tc.want)
			}
			if got := !c.Snapshot()[0].Node.GPUs[0].Healthy; got != tc.held {
				t.Fatalf("GPU 0 held full: %v, want %v", got, tc.held)
			}
		})
	}
}

func TestAliyunAllocation(t *testing.T) {
	model, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := aliyunPod("a", "default", "n1", " 1 ", "", 3, 2)
	req, err := model.PodRequest(p)
	if err != nil {
		t.Fatal(err)
	}
	a, err := record.AliyunAllocation(p, req)
	if err != nil {
		t.Fatal(err)
	}
	want := &gpusharev1.Allocation{Node: "n1", Containers: []gpusharev1.ContainerAllocation{
		{Name: "main", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{{Index: 1, MemoryMiB: 3072}}},
		{Name: "side", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{{Index: 1, MemoryMiB: 2048}}},
	}}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Fatalf("AliyunAllocation (-want +got):\n%s", diff)
	}
	if _, err := record.OnNode(a, req, nil); err == nil || !strings.Contains(err.Error(), "node n1 has no GPU 1") {
		t.Fatalf("OnNode with no GPUs: %v", err)
	}
}

// TestForeignRecordsStayOnTheirGPU: another system's record names its
// GPU by index, which the cache resolves once: an inventory that drops a
// GPU and renumbers the rest keeps the booking on the GPU the pod holds
// (by UUID), not on whatever GPU takes its index; one that drops the
// pod's GPU keeps it booked on a vanished GPU until the pod goes.
func TestForeignRecordsStayOnTheirGPU(t *testing.T) {
	c, refused := aliyunCache(t)
	inv := inventory("n1", gpusharev1.ModeShared, 15360, 15360, 15360)
	c.SetNode(inventoryNode(t, "n1", inv))
	// 3 GiB on GPU 1.
	c.SetPod(aliyunPod("a", "default", "n1", "1", "3", 3))
	if got, want := usage(t, c, "n1"), []alloc.Usage{{}, {MemoryMiB: 3072}, {}}; !cmp.Equal(got, want) {
		t.Fatalf("booked %v, want %v", got, want)
	}
	// GPU 0 leaves: the pod's GPU is now index 0.
	shrunk := &gpusharev1.GPUInventory{Mode: inv.Mode, GPUs: append([]gpusharev1.GPU(nil), inv.GPUs[1:]...)}
	for i := range shrunk.GPUs {
		shrunk.GPUs[i].Index = i
	}
	c.SetNode(inventoryNode(t, "n1", shrunk))
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 3072}, {}}; !cmp.Equal(got, want) {
		t.Errorf("after GPU 0 left: booked %v, want %v: the booking stays on the pod's GPU (UUID %s)", got, want, inv.GPUs[1].UUID)
	}
	// The pod's own GPU leaves: its booking stays, on a vanished GPU.
	c.SetNode(inventoryNode(t, "n1", &gpusharev1.GPUInventory{Mode: inv.Mode, GPUs: []gpusharev1.GPU{{Index: 0, UUID: inv.GPUs[2].UUID,
		Model: inv.GPUs[2].Model, MemoryMiB: 15360, Healthy: true, NUMANode: -1}}}))
	var models []string
	var held int64
	if err := c.Read("n1", func(s *alloc.NodeState) {
		for i, g := range s.Node.GPUs {
			models = append(models, g.Model)
			if g.UUID == inv.GPUs[1].UUID {
				held = s.GPUs[i].MemoryMiB
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if held != 3072 || len(models) != 2 || models[1] != cache.VanishedModel {
		t.Errorf("after the pod's GPU left: GPUs %v, %d MiB held on %s; want it appended as %s, holding 3072", models, held, inv.GPUs[1].UUID, cache.VanishedModel)
	}
	if len(*refused) != 0 {
		t.Errorf("refused %q", *refused)
	}
}
