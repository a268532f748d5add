package sim

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gpushare/gpushare/pkg/trace"
)

// boundOf builds a workload of the given nodes (model: GPUs) and pods and
// bounds it with every pod arrived.
func boundOf(t *testing.T, nodes map[string]int, pods []trace.Pod) float64 {
	t.Helper()
	w := &Workload{Name: "t"}
	for model, gpus := range nodes {
		w.Nodes = append(w.Nodes, trace.Node{Name: "n-" + model, Model: model, GPUs: gpus, CPUMilli: 64000, MemoryMiB: 1 << 20})
	}
	all := make([]int, len(pods))
	for i := range pods {
		pods[i].Name = fmt.Sprintf("p%d", i)
		all[i] = i
	}
	w.Pods = pods
	return Bound(w, all)
}

func share(milli int64, models ...string) trace.Pod {
	return trace.Pod{GPUs: 1, GPUMilli: milli, Models: models}
}

func whole(gpus int, models ...string) trace.Pod {
	return trace.Pod{GPUs: gpus, GPUMilli: 1000, Models: models}
}

func TestBound(t *testing.T) {
	cases := []struct {
		name  string
		nodes map[string]int
		pods  []trace.Pod
		want  float64 // % of the GPUs left unallocated at best
	}{
		{"everything fits", map[string]int{"V100": 2}, []trace.Pod{share(600), share(400), share(600), share(400)}, 0},
		// Two shares above half a GPU cannot share one: the third waits.
		{"shares above half", map[string]int{"V100": 2}, []trace.Pod{share(600), share(600), share(600)}, 40},
		// 4.2 GPUs asked of 4, yet each 810 leaves 190 that only the 150
		// can use.
		{"slivers", map[string]int{"V100": 4}, []trace.Pod{share(810), share(810), share(810), share(810), share(810), share(150)}, 100 * (4000 - 4*810 - 150) / 4000.0},
		// Pods bound to a model use only its GPUs, however many others idle.
		{"model-bound", map[string]int{"T4": 1, "V100": 3}, []trace.Pod{whole(1, "T4"), whole(1, "T4"), whole(1, "T4")}, 75},
		{"model-bound and free", map[string]int{"T4": 1, "V100": 3}, []trace.Pod{whole(2, "T4"), whole(3)}, 0},
		{"no GPU pods", map[string]int{"V100": 2}, []trace.Pod{{CPUMilli: 1000}}, 100},
		{"a model the cluster lacks", map[string]int{"V100": 2}, []trace.Pod{whole(1, "A100"), share(500)}, 75},
	}
	for _, c := range cases {
		if got := boundOf(t, c.nodes, c.pods); math.Abs(got-c.want) > 1e-6 {
			t.Errorf("%s: bound %.4f%%, want %.4f%%", c.name, got, c.want)
		}
	}
}

// No policy beats the bound on any seed: it is a bound.
func TestBoundHoldsForEveryPolicy(t *testing.T) {
	nodes, pods := trace.Synthetic(7, 40)
	w := &Workload{Name: "t", Nodes: nodes, Pods: pods}
	seeds := []uint64{1, 2, 3}
	for _, policy := range []string{"random", "binpack", "bestfit", "fgd-robust"} {
		r, err := Run(context.Background(), w, policy, seeds, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range r.BoundPerSeed {
			if b <= 0 || b > r.PerSeed[i]+1e-9 {
				t.Errorf("%s seed %d: bound %.3f%%, policy left %.3f%%: want 0 < bound <= policy", policy, seeds[i], b, r.PerSeed[i])
			}
		}
	}
}
