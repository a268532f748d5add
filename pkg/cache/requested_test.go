package cache_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/resource"
)

// TestRequestedCPUMemory: every bound pod's CPU and memory counts against
// its node's state, once, whether or not it holds GPUs, and a GPU pod
// assumed with its CPU and then bound with its record is not counted twice.
func TestRequestedCPUMemory(t *testing.T) {
	c := cache.New(klog.Background(), cache.Options{Resources: resource.PodCPUMemory})
	n := gpuNode(t, "n1", 16384)
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse("16"), corev1.ResourceMemory: k8sresource.MustParse("64Gi")}
	c.SetNode(n)
	free := func() (cpu, mem int64) {
		t.Helper()
		if err := c.Read("n1", func(s *alloc.NodeState) { cpu, mem = s.FreeCPU(), s.FreeMemory() }); err != nil {
			t.Fatal(err)
		}
		return cpu, mem
	}
	withRequests := func(p *corev1.Pod, cpu, mem string) *corev1.Pod {
		p.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: k8sresource.MustParse(cpu), corev1.ResourceMemory: k8sresource.MustParse(mem)}}}}
		return p
	}

	// A pod without GPUs, bound before the node was known, and again
	// after: counted once.
	plain := withRequests(&corev1.Pod{}, "2", "4Gi")
	plain.UID, plain.Name, plain.Namespace, plain.Spec.NodeName = "plain", "plain", "default", "n1"
	c.SetPod(plain)
	c.SetPod(plain)
	if cpu, mem := free(); cpu != 14000 || mem != 60*1024 {
		t.Fatalf("after a 2-CPU 4Gi pod: free %dm %d MiB, want 14000m 61440 MiB", cpu, mem)
	}
	// A node that comes back rebuilt keeps the count.
	c.RemoveNode("n1")
	c.SetNode(n)
	if cpu, _ := free(); cpu != 14000 {
		t.Fatalf("after the node came back: free %dm, want 14000m", cpu)
	}

	// A GPU pod: assumed with its CPU, then bound with its record.
	p := placement("n1", 0, 4000, 0)
	p.CPUMilli, p.MemoryMiB = 4000, 1024
	if err := c.Assume("gpu", "default/gpu", p); err != nil {
		t.Fatal(err)
	}
	if cpu, _ := free(); cpu != 10000 {
		t.Fatalf("after assuming a 4-CPU pod: free %dm, want 10000m", cpu)
	}
	bound := withRequests(recordedPod(t, "gpu", appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4000, 0)})), "4", "1Gi")
	c.SetPod(bound)
	if cpu, mem := free(); cpu != 10000 || mem != 59*1024 {
		t.Fatalf("after the GPU pod was bound: free %dm %d MiB, want 10000m 60416 MiB", cpu, mem)
	}

	for _, uid := range []types.UID{"gpu", "plain"} {
		c.RemovePod(uid)
	}
	if cpu, mem := free(); cpu != 16000 || mem != 64*1024 {
		t.Errorf("after both pods left: free %dm %d MiB, want all 16000m 65536 MiB", cpu, mem)
	}
}
