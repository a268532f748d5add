package cache_test

import (
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/resource"
)

// footprintCluster returns the scheduler benchmark's cluster
// (test/bench/scheduler) with every pod bound: its nodes, of eight 80 GB
// GPUs, each pod one container with a share of one GPU and its record as
// gpushare-scheduler writes it.
func footprintCluster(b *testing.B, nodes, pods int) ([]*corev1.Node, []*corev1.Pod) {
	b.Helper()
	ns := make([]*corev1.Node, nodes)
	for i := range ns {
		spec := controlplane.NodeSpec{Name: fmt.Sprintf("node-%05d", i), Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: 8}
		n, err := spec.Node()
		if err != nil {
			b.Fatal(err)
		}
		res := corev1.ResourceList{
			corev1.ResourceCPU:    *k8sresource.NewQuantity(64, k8sresource.DecimalSI),
			corev1.ResourceMemory: *k8sresource.NewQuantity(512<<30, k8sresource.BinarySI),
			corev1.ResourcePods:   *k8sresource.NewQuantity(250, k8sresource.DecimalSI),
		}
		n.Status.Capacity, n.Status.Allocatable = res, res
		ns[i] = n
	}
	sizes := []int64{2048, 4096, 8192, 10240, 20480}
	ps := make([]*corev1.Pod, pods)
	for i := range ps {
		node, gpu, mib := fmt.Sprintf("node-%05d", i%nodes), (i/nodes)%8, sizes[i%len(sizes)]
		value, err := gpusharev1.Marshal(&gpusharev1.Allocation{Node: node, Containers: []gpusharev1.ContainerAllocation{{
			Name: "main", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{share(node, gpu, mib, 0)},
		}}, Asked: &gpusharev1.Asked{}})
		if err != nil {
			b.Fatal(err)
		}
		ps[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Namespace: "default",
				UID: types.UID(fmt.Sprintf("uid-%05d", i)), Annotations: map[string]string{gpusharev1.AllocationAnnotation: value}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    k8sresource.MustParse("100m"),
						corev1.ResourceMemory: k8sresource.MustParse("128Mi"),
					},
					Limits: corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(mib, k8sresource.DecimalSI)},
				}}}},
		}
	}
	return ns, ps
}

// filled returns c with nodes and pods set, nodes first.
func filled(c *cache.Cache, nodes []*corev1.Node, pods []*corev1.Pod) *cache.Cache {
	for _, n := range nodes {
		c.SetNode(n)
	}
	for _, p := range pods {
		c.SetPod(p)
	}
	return c
}

// BenchmarkFootprint reports the heap the cache holds, beyond the
// informer's objects, for the scheduler benchmark's 5000 nodes and
// 10,000 bound pods, with the options gpushare-scheduler gives it.
func BenchmarkFootprint(b *testing.B) {
	nodes, pods := footprintCluster(b, 5000, 10000)
	model, err := resource.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	opts := cache.Options{
		Requests:           model.PodRequest,
		RequestAnnotations: func(*corev1.Pod) []string { return model.RequestAnnotations() },
		Resources:          resource.PodCPUMemory,
	}
	var held uint64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := filled(cache.New(klog.Background(), opts), nodes, pods)
		runtime.GC()
		runtime.ReadMemStats(&after)
		var booked int
		if err := c.Read("node-00000", func(s *alloc.NodeState) {
			for _, u := range s.GPUs {
				booked += int(u.MemoryMiB)
			}
		}); err != nil || booked == 0 {
			b.Fatalf("node-00000: %d MiB booked, %v", booked, err)
		}
		held = after.HeapAlloc - before.HeapAlloc
		runtime.KeepAlive(c)
	}
	b.ReportMetric(float64(held)/1e6, "MB")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkScrape gathers and encodes the cache's metrics for the
// scheduler benchmark's cluster, as a Prometheus scrape of the
// scheduler does: four gauges per GPU, 160,000 in all.
func BenchmarkScrape(b *testing.B) {
	nodes, pods := footprintCluster(b, 5000, 10000)
	c := filled(cache.New(klog.Background(), cache.Options{}), nodes, pods)
	reg := prometheus.NewRegistry()
	reg.MustRegister(cache.NewCollector(c))
	for b.Loop() {
		families, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, f := range families {
			if err := enc.Encode(f); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkSupply reads the cache's supply, with what is free of each
// GPU kind, for the scheduler benchmark's cluster (40,000 GPUs): what a
// policy that weighs model-bound demand does every
// workload.SupplyRefresh pods, under the cache's read lock.
func BenchmarkSupply(b *testing.B) {
	nodes, pods := footprintCluster(b, 5000, 10000)
	c := filled(cache.New(klog.Background(), cache.Options{}), nodes, pods)
	for b.Loop() {
		if s, _ := c.Supply(); len(s) == 0 || s[0].Free == 0 {
			b.Fatalf("supply %+v: want free GPUs", s)
		}
	}
}

// BenchmarkRoom reads the room for keeping idle GPUs spare over the
// scheduler benchmark's cluster (5000 nodes, 10,000 bound pods): what
// a policy that keeps them (workload.keepIdleGPUs, the default) does
// under the cache's read lock every workload.SupplyRefresh pods placed.
func BenchmarkRoom(b *testing.B) {
	nodes, pods := footprintCluster(b, 5000, 10000)
	c := filled(cache.New(klog.Background(), cache.Options{}), nodes, pods)
	sp := alloc.SpareOf([]alloc.Shape{
		{CPUMilli: 4000, MemoryMiB: 16384, Count: 1, Demand: alloc.Demand{Exclusive: true}, Weight: 1},
		{CPUMilli: 2000, MemoryMiB: 8192, Count: 1, Demand: alloc.Demand{MemoryMiB: 8192}, Weight: 3},
	}, 81920)
	for b.Loop() {
		if r, _ := c.Room(&sp); r.Idle == 0 {
			b.Fatalf("room %+v: want idle GPUs", r)
		}
	}
}
