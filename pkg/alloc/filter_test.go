package alloc

import (
	"errors"
	"strings"
	"testing"
)

func TestFilter(t *testing.T) {
	v100 := GPU{UUID: "GPU-a", Model: "Tesla V100-PCIE-32GB"}
	a100 := GPU{UUID: "GPU-b", Model: "NVIDIA A100-SXM4-40GB"}
	t4 := GPU{UUID: "GPU-c", Model: "Tesla T4"}
	for _, c := range []struct {
		f    *Filter
		want []bool // v100, a100, t4
	}{
		{nil, []bool{true, true, true}},
		{&Filter{Types: []string{"a100", "V100"}}, []bool{true, true, false}},
		// HAMi's type of a Tesla is "NVIDIA-Tesla ...", of an A100 its model.
		{&Filter{Types: []string{"nvidia-tesla"}}, []bool{true, false, true}},
		{&Filter{NotTypes: []string{"T4"}}, []bool{true, true, false}},
		{&Filter{UUIDs: []string{"GPU-b", "GPU-c"}, NotUUIDs: []string{"GPU-c"}}, []bool{false, true, false}},
		{&Filter{UUIDs: []string{"gpu-b"}}, []bool{false, false, false}},
	} {
		for i, g := range []GPU{v100, a100, t4} {
			if got := c.f.Allows(&g); got != c.want[i] {
				t.Errorf("%s allows %s: %v, want %v", c.f, g.Model, got, c.want[i])
			}
		}
	}
}

// A pod whose annotations exclude every GPU of a node is told so, and a
// record that puts it on an excluded GPU does not conform.
func TestFilterUnfit(t *testing.T) {
	b := makeNode("n").gpus(2, "Tesla T4", 15000)
	b.n.GPUs[0].UUID, b.n.GPUs[1].UUID = "GPU-0", "GPU-1"
	f := &Filter{NotTypes: []string{"t4"}}
	pod := makePod("p").container(App, ContainerRequest{Name: "c", MemoryMiB: 1000, Filter: f}).obj()
	_, unfit := mustPlacer("binpack").Place(b.state(), pod)
	if unfit == nil || unfit.Reasons[0].Reason != ReasonExcluded || !strings.Contains(unfit.Error(), "exclude every GPU (nouse-gputype t4)") {
		t.Fatalf("unfit = %v, want %s naming the filter", unfit, ReasonExcluded)
	}
	if d := Diagnose(1, []*Unfit{unfit}).String(); d != "0/1 nodes are available: 1 GPUExcluded; the pod's annotations exclude every GPU (nouse-gputype t4)." {
		t.Errorf("pod event %q", d)
	}
	pod.Containers[0].Filter = &Filter{UUIDs: []string{"GPU-1"}}
	p, unfit := mustPlacer("binpack").Place(b.state(), pod)
	if unfit != nil || p.Containers[0].GPUs[0].GPU != 1 {
		t.Fatalf("use-gpuuuid GPU-1 placed %+v (%v)", p, unfit)
	}
	p.Containers[0].GPUs[0].GPU = 0
	if err := Conform(p, pod, &b.n); !errors.Is(err, ErrNonconforming) {
		t.Errorf("Conform on GPU-0: %v, want ErrNonconforming", err)
	}
}
