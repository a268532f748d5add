package alloc

import "testing"

// A GPU whose booked share is low but whose real memory use is high is
// not chosen first; without fresh samples load-aware is binpack.
func TestLoadAwareGPU(t *testing.T) {
	// GPU 0: 4 GiB of 16 booked, 14 GiB really in use (10 GiB by
	// something outside the bookings: 625 permille unbooked, step 600).
	// GPU 1: 2 GiB booked and in use. Binpack takes GPU 0 (fuller).
	node := makeNode("n").gpus(2, "T4", 16384)
	pod := makePod("p").shared("main", 1024, 0).obj()
	for _, c := range []struct {
		name string
		live []Live
		want int
	}{
		{"fresh samples", []Live{{Valid: true, MemoryMiB: 14336}, {Valid: true, MemoryMiB: 2048}}, 1},
		{"stale samples", []Live{{Valid: false, MemoryMiB: 14336}, {Valid: false, MemoryMiB: 2048}}, 0},
		{"no samples", nil, 0},
		// Busy engine: GPU 0's memory is as booked, but it runs at 95%.
		{"busy engine", []Live{{Valid: true, MemoryMiB: 4096, Utilization: 95}, {Valid: true, MemoryMiB: 2048, Utilization: 10}}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := node.state(Usage{MemoryMiB: 4096}, Usage{MemoryMiB: 2048})
			s.Live = c.live
			pl, err := NewPlacer(Config{Node: "load-aware"})
			if err != nil {
				t.Fatal(err)
			}
			p, unfit := pl.Place(s, pod)
			if unfit != nil {
				t.Fatal(unfit)
			}
			if got := p.Containers[0].GPUs[0].GPU; got != c.want {
				t.Errorf("chose GPU %d, want %d", got, c.want)
			}
		})
	}
}

// Between nodes, the one with less pressure wins even when binpack
// prefers the other.
func TestLoadAwareNode(t *testing.T) {
	hot := makeNode("hot").gpus(1, "T4", 16384).state(Usage{MemoryMiB: 8192})
	hot.Live = []Live{{Valid: true, MemoryMiB: 16000}}
	cool := makeNode("cool").gpus(1, "T4", 16384).state(Usage{MemoryMiB: 2048})
	cool.Live = []Live{{Valid: true, MemoryMiB: 2048}}
	pod := makePod("p").shared("main", 1024, 0).obj()
	for policy, want := range map[string]string{"binpack": "hot", "load-aware": "cool"} {
		pl, err := NewPlacer(Config{Node: policy})
		if err != nil {
			t.Fatal(err)
		}
		d := pl.Pick([]*NodeState{hot, cool}, pod, 1)
		if d.Index < 0 || d.Placement.Node != want {
			t.Errorf("%s picked %+v, want %s", policy, d.Placement, want)
		}
	}
}
