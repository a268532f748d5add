package alloc

import "testing"

// TestChurn: the ratio of GPU demand released to placed, and the demand
// turned away, in a window that forgets old placements.
func TestChurn(t *testing.T) {
	var c Churn
	if r := c.Turnover(); r != 0 {
		t.Errorf("empty: turnover %v, want 0", r)
	}
	c.Place(1000)
	c.Place(1000)
	c.Release(1000)
	c.TurnAway(500)
	if r := c.Turnover(); r < 0.49 || r > 0.51 {
		t.Errorf("2 GPUs placed, 1 released: turnover %v, want about 0.5", r)
	}
	if a := c.Away(); a != 0.5 {
		t.Errorf("half a GPU turned away: away %v, want 0.5", a)
	}
	for range 100 {
		c.Release(1000)
	}
	if r := c.Turnover(); r != 1 {
		t.Errorf("more released than placed: turnover %v, want 1", r)
	}
	// Negative amounts count as none.
	c.Release(-5000)
	c.TurnAway(-5000)
	if a := c.Away(); a != 0.5 {
		t.Errorf("after negative amounts: away %v, want 0.5", a)
	}
	// 2000 GPUs placed halve what was counted before them.
	c.Place(2000 * 1000)
	if a := c.Away(); a < 0.249 || a > 0.251 {
		t.Errorf("after 2000 GPUs placed: away %v, want 0.25", a)
	}
	// A cluster that then only fills forgets what was released.
	for range 20000 {
		c.Place(1000)
	}
	if r := c.Turnover(); r > 0.01 {
		t.Errorf("after 20,000 GPUs placed and none released: turnover %v, want near 0", r)
	}
}

func TestPodRequestShare(t *testing.T) {
	pod := PodRequest{Containers: []PodContainer{
		// 2 whole GPUs: 2000.
		{ContainerRequest: ContainerRequest{Name: "train", Count: 2, Exclusive: true}},
		// 30% of compute: 300.
		{ContainerRequest: ContainerRequest{Name: "infer", Compute: 30}},
		// 8 GiB over 2 GPUs of 16 GiB: 2 × 250.
		{ContainerRequest: ContainerRequest{Name: "embed", Count: 2, MemoryMiB: 8192}},
		// A sidecar runs beside the app: 25% of memory, 250.
		{ContainerRequest: ContainerRequest{Name: "proxy", MemoryPercent: 25}, Kind: Sidecar},
		// An init container books nothing of its own.
		{ContainerRequest: ContainerRequest{Name: "warm", Count: 4, Exclusive: true}, Kind: Init},
	}}
	if got := pod.Share(16384); got != 3050 {
		t.Errorf("Share = %d, want 3050", got)
	}
	if got := (&PodRequest{}).Share(16384); got != 0 {
		t.Errorf("a pod without GPUs: Share = %d, want 0", got)
	}
}

func TestPlacementShare(t *testing.T) {
	n := &Node{Name: "n", GPUs: []GPU{
		{MemoryMiB: 16384, Healthy: true},
		{MemoryMiB: 16384, Healthy: false},
		{MemoryMiB: 40960, Healthy: true},
	}}
	p := &Placement{Node: "n", Booked: []Assignment{
		{GPU: 0, Usage: Usage{MemoryMiB: 4096, Compute: 10}},   // memory binds: 250
		{GPU: 1, Usage: Usage{MemoryMiB: 16384, Compute: 100}}, // whole, failed since: 1000
		{GPU: 2, Usage: Usage{MemoryMiB: 1024, Compute: 60}},   // compute binds: 600
		{GPU: 7, Usage: Usage{MemoryMiB: 1024, Compute: 60}},   // not n's: nothing
	}}
	if got := p.Share(n); got != 1850 {
		t.Errorf("Share = %d, want 1850", got)
	}
}
