package sim

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/trace"
	"github.com/gpushare/gpushare/pkg/workload"
)

// churnWorkload is one node of gpus GPUs and pods of whole GPUs, each
// living lifetime seconds.
func churnWorkload(gpus, pods int, lifetime int64) *Workload {
	w := &Workload{Name: "churn", Nodes: []trace.Node{{Name: "n0", Model: "V100M16", GPUs: gpus, CPUMilli: 64000, MemoryMiB: 1 << 20}}}
	for i := range pods {
		w.Pods = append(w.Pods, trace.Pod{Name: string(rune('a' + i)), CPUMilli: 1000, MemoryMiB: 1024, GPUs: 1, GPUMilli: 1000,
			Created: int64(i), Deleted: int64(i) + lifetime, HasTimes: true})
	}
	return w
}

func TestChurnHoldsTheOfferedLoad(t *testing.T) {
	// Two pods of 100 s on two GPUs: at load 1 they arrive every 50 s
	// and two always run; at load 0.5, every 100 s and one runs.
	for _, load := range []float64{1, 0.5} {
		r, err := Churn(context.Background(), churnWorkload(2, 2, 100), "fgd-robust", []uint64{1}, ChurnOptions{Load: load})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(r.Allocated-100*load) > 1e-9 || r.Waited != 0 || r.TurnedAway != 0 {
			t.Errorf("load %v: allocated %.3f%%, waited %.1f%%, turned away %.1f%%; want %.0f%%, none waiting", load, r.Allocated, r.Waited, r.TurnedAway, 100*load)
		}
	}
}

func TestChurnQueuesWhatDoesNotFit(t *testing.T) {
	// One GPU, pods of 100 s every 50 s: the GPU is always busy, every
	// other pod waits, and those that wait as long as they would run give
	// up.
	r, err := Churn(context.Background(), churnWorkload(1, 2, 100), "fgd-robust", []uint64{1}, ChurnOptions{Load: 2})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.Allocated-100) > 1e-9 {
		t.Errorf("allocated %.3f%%, want 100%%", r.Allocated)
	}
	if r.Waited <= 0 || r.TurnedAway <= 0 || r.TurnedAway > r.Waited || r.WaitP50s <= 0 || r.WaitP50s >= 100 {
		t.Errorf("waited %.1f%%, turned away %.1f%%, wait p50 %.0f s: want some waiting, some giving up, waits under the 100 s lifetime", r.Waited, r.TurnedAway, r.WaitP50s)
	}
}

func TestChurnNeedsTimes(t *testing.T) {
	w := churnWorkload(1, 2, 100)
	w.Pods[1].HasTimes = false
	_, err := Churn(context.Background(), w, "fgd-robust", []uint64{1}, ChurnOptions{})
	if err == nil || !strings.Contains(err.Error(), "no creation and deletion times") {
		t.Errorf("pod without times: got %v, want an error naming them", err)
	}
	if _, err := Churn(context.Background(), churnWorkload(1, 2, 100), "fgd-robust", []uint64{1}, ChurnOptions{Passes: 2}); err == nil {
		t.Error("2 passes: want an error (the warm-up takes 4)")
	}
}

func TestChurnWithDefragRuns(t *testing.T) {
	nodes, pods := trace.Synthetic(3, 20)
	for i := range pods {
		pods[i].Created, pods[i].Deleted, pods[i].HasTimes = int64(i), int64(i)+int64(60+i%7*600), true
	}
	w := &Workload{Name: "t", Nodes: nodes, Pods: pods}
	for _, d := range []*Defrag{nil, {Movable: 0.5, Budget: alloc.DefragBudget{MaxMoves: 3, MaxTargets: 64}}} {
		r, err := Churn(context.Background(), w, "fgd-robust", []uint64{1, 2}, ChurnOptions{Load: 1.1, Defrag: d})
		if err != nil {
			t.Fatal(err)
		}
		if r.Allocated <= 0 || r.Allocated > 100 || len(r.AllocatedPerSeed) != 2 {
			t.Errorf("defrag %v: allocated %.2f%% per seed %v: want within (0, 100] for each of 2 seeds", d != nil, r.Allocated, r.AllocatedPerSeed)
		}
	}
	// Where pods leave as fast as they come, the turnover keeps nothing
	// spare: the replay is the same with and without it.
	plain, err := Churn(context.Background(), w, "fgd-robust", []uint64{1}, ChurnOptions{Load: 1.1, Workload: Online})
	if err != nil {
		t.Fatal(err)
	}
	spare, err := Churn(context.Background(), w, "fgd-robust", []uint64{1}, ChurnOptions{Load: 1.1, Workload: Online, Learn: workload.Config{Spare: true}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plain, spare); diff != "" {
		t.Errorf("keeping idle GPUs spare changed a replay where pods leave as fast as they come:\n%s", diff)
	}
}
