package sim

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/trace"
)

func TestZZAnalysis(t *testing.T) {
	dir := os.Getenv("OPENB")
	if dir == "" {
		t.Skip()
	}
	wl := os.Getenv("WL")
	if wl == "" {
		wl = "default"
	}
	nodesT, _ := trace.ReadNodesFile(dir + "/openb_node_list_gpu_node.csv")
	pods, _ := trace.ReadPodsFile(dir + "/openb_pod_list_" + wl + ".csv")
	w := &Workload{Name: wl, Nodes: nodesT, Pods: pods}
	policy := os.Getenv("POL")
	cfg := parsePolicy(policy)
	cfg.Workload = Shapes(w.Pods, shapeCover)
	nodes, _ := w.nodes()
	var seed uint64 = 42
	cfg.Seed = seed
	pl, err := alloc.NewPlacer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	states := make([]*alloc.NodeState, len(nodes))
	for i, n := range nodes {
		states[i] = alloc.NewNodeState(n)
	}
	capacity := float64(w.Capacity())
	var arrived int64
	fails := map[string]float64{}
	var firstFail = map[string]float64{}
	for _, i := range order(w, seed) {
		p := &w.Pods[i]
		if float64(arrived) >= capacity {
			break
		}
		req := request(p)
		d := pl.Pick(states, &req, seed)
		if d.Placement != nil {
			states[d.Index].Apply(d.Placement)
		} else {
			k := fmt.Sprintf("g%d m%d spec=%s", p.GPUs, p.GPUMilli, strings.Join(p.Models, "|"))
			fails[k] += float64(p.RequestedMilli()) / capacity * 100
			if _, ok := firstFail[k]; !ok {
				firstFail[k] = 100 * float64(arrived) / capacity
			}
		}
		arrived += p.RequestedMilli()
	}
	var keys []string
	for k := range fails {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return fails[keys[a]] > fails[keys[b]] })
	var tot float64
	for _, k := range keys {
		tot += fails[k]
		fmt.Printf("%-40s %.3f%% first at %.1f%%\n", k, fails[k], firstFail[k])
	}
	fmt.Printf("total failed %.3f\n", tot)
	// free capacity breakdown
	byModel := map[string][3]float64{}
	for _, s := range states {
		for g := range s.Node.GPUs {
			f := float64(s.FreeShare(g))
			m := s.Node.GPUs[g].Model
			v := byModel[m]
			if f >= 1000 {
				v[0] += f / capacity * 100
			} else if f >= 200 {
				v[1] += f / capacity * 100
			} else {
				v[2] += f / capacity * 100
			}
			byModel[m] = v
		}
	}
	hist := map[string]int{}
	for _, s := range states {
		for g := range s.Node.GPUs {
			f := s.FreeShare(g)
			if f >= 200 {
				cpuOK := s.FreeCPU() >= 2000
				k := fmt.Sprintf("free=%d cpu>=2=%v", f/100*100, cpuOK)
				if f >= 1000 { k = fmt.Sprintf("whole cpufree=%d memfree=%d", s.FreeCPU()/1000, s.FreeMemory()/1024) }
				hist[k]++
			}
		}
	}
	for k, v := range hist { fmt.Println(k, v) }
	for m, v := range byModel {
		fmt.Printf("free %-8s whole %.3f part>=0.2 %.3f small %.3f\n", m, v[0], v[1], v[2])
	}
}
