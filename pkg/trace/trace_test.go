package trace

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.csv")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadPodsFile(t *testing.T) {
	p := write(t, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"+
		"a,1000,2048,1,470,,LS\nb,8000,100,2,1000,V100M16|V100M32,BE\nc,500,10,0,0,,BE\n")
	got, err := ReadPodsFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Pod{
		{Name: "a", CPUMilli: 1000, MemoryMiB: 2048, GPUs: 1, GPUMilli: 470},
		{Name: "b", CPUMilli: 8000, MemoryMiB: 100, GPUs: 2, GPUMilli: 1000, Models: []string{"V100M16", "V100M32"}},
		{Name: "c", CPUMilli: 500, MemoryMiB: 10},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}
	if got[1].RequestedMilli() != 2000 || got[0].RequestedMilli() != 470 {
		t.Errorf("RequestedMilli: got %d and %d", got[1].RequestedMilli(), got[0].RequestedMilli())
	}
}

func TestReadPodTimes(t *testing.T) {
	p := write(t, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"+
		"a,1000,2048,1,470,,LS,Running,100,1300,100\nb,1000,2048,1,470,,LS,Pending,500,,\n")
	got, err := ReadPodsFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].HasTimes || got[0].Lifetime() != 1200 || got[1].HasTimes || got[1].Lifetime() != 0 {
		t.Errorf("times: got %+v and %+v, want a living 1200 s and b without times", got[0], got[1])
	}
}

func TestReadBadFiles(t *testing.T) {
	cases := map[string]struct {
		body  string
		nodes bool
	}{
		"wrong header":      {body: "x,y\n1,2\n"},
		"not a number":      {body: "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,lots,1,0,0\n"},
		"share of 2 GPUs":   {body: "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,2,500\n"},
		"share above whole": {body: "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,1500\n"},
		"short row":         {body: "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1\n"},
		"bad time":          {body: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\na,1,1,1,500,soon,9\n"},
		"unknown model":     {body: "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,Z9\n", nodes: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := write(t, tc.body)
			var err error
			if tc.nodes {
				_, err = ReadNodesFile(p)
			} else {
				_, err = ReadPodsFile(p)
			}
			if err == nil {
				t.Error("want an error")
			}
		})
	}
	if _, err := ReadNodesFile(filepath.Join(t.TempDir(), "missing.csv")); err == nil {
		t.Error("missing file: want an error")
	}
}

func TestSyntheticIsSeeded(t *testing.T) {
	n1, p1 := Synthetic(5, 50)
	n2, p2 := Synthetic(5, 50)
	if !cmp.Equal(n1, n2) || !cmp.Equal(p1, p2) {
		t.Error("same seed gave different workloads")
	}
	var gpus, demand int64
	for _, n := range n1 {
		gpus += int64(n.GPUs)
		if _, ok := GPUMemoryMiB(n.Model); !ok {
			t.Errorf("node %s: model %q has no memory size", n.Name, n.Model)
		}
	}
	for _, p := range p1 {
		demand += p.RequestedMilli()
	}
	if demand < gpus*1000 {
		t.Errorf("workload asks %d milli-GPU, want at least the cluster's %d", demand, gpus*1000)
	}
}
