package alloc

import (
	"errors"
	"testing"
)

// A percent of GPU memory books that share of whichever GPU the container
// lands on, however large: HAMi's nvidia.com/gpumem-percentage.
func TestMemoryPercent(t *testing.T) {
	n := makeNode("n").gpus(1, "T4", 15000).gpus(1, "A100", 80000)
	pod := makePod("p").container(App, ContainerRequest{Name: "c", Count: 2, MemoryPercent: 50, Compute: 10}).obj()
	pl := mustPlacer("binpack")
	p, unfit := pl.Place(n.state(), pod)
	if unfit != nil {
		t.Fatalf("unfit: %v", unfit)
	}
	want := map[int]int64{0: 7500, 1: 40000}
	for _, a := range p.Containers[0].GPUs {
		if a.MemoryMiB != want[a.GPU] || a.Compute != 10 {
			t.Errorf("GPU %d books %d MiB %d%%, want %d MiB 10%%", a.GPU, a.MemoryMiB, a.Compute, want[a.GPU])
		}
	}
	if err := Conform(p, pod, &n.n); err != nil {
		t.Errorf("Conform refuses Place's own placement: %v", err)
	}
	// A record that books a fixed 7500 MiB on the A100 is not 50% of it.
	forged := *p
	forged.Containers = []ContainerPlacement{{Name: "c", Kind: App, GPUs: []Assignment{
		{GPU: 0, Usage: Usage{MemoryMiB: 7500, Compute: 10}}, {GPU: 1, Usage: Usage{MemoryMiB: 7500, Compute: 10}}}}}
	if err := Conform(&forged, pod, &n.n); !errors.Is(err, ErrNonconforming) {
		t.Errorf("Conform of 7500 MiB on an 80000 MiB GPU asked at 50%%: %v, want ErrNonconforming", err)
	}

	// Once half of the A100 is booked, 60% fits only the T4... which is
	// then too small to take a second container: the reason names memory.
	s := n.state(Usage{}, Usage{MemoryMiB: 40000})
	one := makePod("q").container(App, ContainerRequest{Name: "c", MemoryPercent: 60}).obj()
	p, unfit = pl.Place(s, one)
	if unfit != nil || p.Containers[0].GPUs[0].GPU != 0 || p.Containers[0].GPUs[0].MemoryMiB != 9000 {
		t.Fatalf("60%% placed %+v (%v), want GPU 0 with 9000 MiB", p, unfit)
	}
	if err := s.Apply(p); err != nil {
		t.Fatal(err)
	}
	if _, unfit := pl.Place(s, one); unfit == nil || unfit.Reasons[0].Reason != ReasonGPUMemory {
		t.Errorf("a second 60%% container: %v, want %s", unfit, ReasonGPUMemory)
	}
}

func TestMemoryPercentInvalid(t *testing.T) {
	for _, c := range []ContainerRequest{
		{Name: "over", MemoryPercent: 101},
		{Name: "both", MemoryPercent: 50, MemoryMiB: 100},
		{Name: "whole", MemoryPercent: 50, Exclusive: true},
		{Name: "negative", MemoryPercent: -1, Compute: 10},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: Validate = %v, want ErrInvalidRequest", c.Name, err)
		}
	}
	if err := (&ContainerRequest{Name: "ok", MemoryPercent: 100}).Validate(); err != nil {
		t.Errorf("100%%: %v", err)
	}
}
