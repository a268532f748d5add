package plugin_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/parallelize"
)

// BenchmarkCycle is one scheduling cycle of a GPU pod as kube-scheduler
// runs it at 5000 nodes (make bench-scheduler's cluster: 8 x 80 GiB GPUs
// per node, pods of 2-20 GiB): PreFilter, Filter on the 500 nodes it looks
// for (here: tries), 16 at a time, NormalizeScore, and Reserve then Unreserve. The
// benchmark's 10,000 pods are booked first, by the plugin's own choices.
func BenchmarkCycle(b *testing.B) {
	const nodes, feasible, gpuMiB = 5000, 500, 81920
	list := make([]*corev1.Node, nodes)
	for i := range list {
		list[i] = gpuNode(b, fmt.Sprintf("node-%05d", i), gpuMiB, gpuMiB, gpuMiB, gpuMiB, gpuMiB, gpuMiB, gpuMiB, gpuMiB)
	}
	c := newClusterOf(b, list)
	fw := c.profile("default-scheduler")
	c.start()
	sizes := []int64{2048, 4096, 8192, 10240, 20480}
	rng := rand.New(rand.NewPCG(42, 1))
	// Filter gets each node as kube-scheduler's snapshot holds it: the
	// object the informer delivered, which the GPU cache saw too.
	infos := make([]fwk.NodeInfo, nodes)
	lister := c.factory.Core().V1().Nodes().Lister()
	for i, n := range list {
		object, err := lister.Get(n.Name)
		if err != nil {
			b.Fatal(err)
		}
		ni := framework.NewNodeInfo()
		ni.SetNode(object)
		infos[i] = ni
	}
	par := parallelize.NewParallelizer(parallelize.DefaultParallelism)
	next := 0
	cycle := func(i int, keep bool) {
		pod := gpuPod(fmt.Sprintf("pod-%d", i), "default-scheduler", sizes[rng.IntN(len(sizes))])
		state := framework.NewCycleState()
		if _, s, _ := fw.RunPreFilterPlugins(c.ctx, state, pod); !s.IsSuccess() {
			b.Fatalf("PreFilter: %v", s)
		}
		fits := make([]fwk.NodeInfo, feasible)
		par.Until(c.ctx, feasible, func(k int) {
			ni := infos[(next+k)%nodes]
			if s := fw.RunFilterPlugins(c.ctx, state, pod, ni); s.IsSuccess() {
				fits[k] = ni
			}
		}, "filter")
		next = (next + feasible) % nodes
		var passed []fwk.NodeInfo
		for _, ni := range fits {
			if ni != nil {
				passed = append(passed, ni)
			}
		}
		if len(passed) == 0 {
			b.Fatalf("no node of %d fits pod %d", feasible, i)
		}
		if s := fw.RunPreScorePlugins(c.ctx, state, pod, passed); !s.IsSuccess() {
			b.Fatalf("PreScore: %v", s)
		}
		scores, s := fw.RunScorePlugins(c.ctx, state, pod, passed)
		if !s.IsSuccess() {
			b.Fatalf("Score: %v", s)
		}
		best := scores[0]
		for _, ns := range scores {
			if ns.TotalScore > best.TotalScore {
				best = ns
			}
		}
		if s := fw.RunReservePluginsReserve(c.ctx, state, pod, best.Name); !s.IsSuccess() {
			b.Fatalf("Reserve: %v", s)
		}
		if !keep {
			fw.RunReservePluginsUnreserve(c.ctx, state, pod, best.Name)
		}
	}
	for i := range 10000 {
		cycle(i, true)
	}
	b.ResetTimer()
	for i := range b.N {
		cycle(-1-i, false)
	}
}
