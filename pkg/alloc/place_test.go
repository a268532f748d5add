package alloc

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// gpusOf lists the GPUs each container got.
func gpusOf(p *Placement) [][]int {
	out := make([][]int, len(p.Containers))
	for i, c := range p.Containers {
		for _, a := range c.GPUs {
			out[i] = append(out[i], a.GPU)
		}
	}
	return out
}

func TestPlace(t *testing.T) {
	cases := map[string]struct {
		state  *NodeState
		pod    *PodRequest
		policy string
		want   [][]int
		booked []Assignment
	}{
		"binpack picks the fullest GPU that fits": {
			// Free: GPU0 16384, GPU1 4096, GPU2 6144. The pod needs 5000:
			// GPU1 is too small, GPU2 (6144 free) is the best fit.
			state:  makeNode("n").gpus(3, "A100", 16384).state(Usage{}, Usage{MemoryMiB: 12288}, Usage{MemoryMiB: 10240}),
			pod:    makePod("p").shared("c", 5000, 0).obj(),
			policy: "binpack",
			want:   [][]int{{2}},
		},
		"spread picks the emptiest GPU": {
			state:  makeNode("n").gpus(3, "A100", 16384).state(Usage{MemoryMiB: 1}, Usage{}, Usage{MemoryMiB: 10240}),
			pod:    makePod("p").shared("c", 5000, 0).obj(),
			policy: "spread",
			want:   [][]int{{1}},
		},
		"ties go to the lowest index": {
			state:  makeNode("n").gpus(4, "A100", 16384).state(),
			pod:    makePod("p").shared("c", 1000, 10).obj(),
			policy: "binpack",
			want:   [][]int{{0}},
		},
		"two containers each get their own share": {
			// 10000 + 10000 MiB do not fit one 16384 MiB GPU, so binpack puts
			// the second container on the next GPU.
			state:  makeNode("n").gpus(2, "A100", 16384).state(),
			pod:    makePod("p").shared("a", 10000, 0).shared("b", 10000, 0).obj(),
			policy: "binpack",
			want:   [][]int{{0}, {1}},
			booked: []Assignment{
				{GPU: 0, UUID: "GPU-n-0", Usage: Usage{MemoryMiB: 10000}},
				{GPU: 1, UUID: "GPU-n-1", Usage: Usage{MemoryMiB: 10000}},
			},
		},
		"a whole GPU books all of it": {
			state:  makeNode("n").gpus(2, "A100", 16384).state(Usage{MemoryMiB: 1}),
			pod:    makePod("p").whole("c", 1).obj(),
			policy: "binpack",
			want:   [][]int{{1}},
			booked: []Assignment{{GPU: 1, UUID: "GPU-n-1", Usage: Usage{MemoryMiB: 16384, Compute: 100}}},
		},
		"an init container reuses the app's share": {
			// App 6000 on GPU0; the init container (8000) runs before it, so
			// the pod books max(6000, 8000) = 8000 on GPU0, not 14000.
			state: makeNode("n").gpus(1, "A100", 16384).state(),
			pod: makePod("p").container(Init, ContainerRequest{Name: "init", MemoryMiB: 8000}).
				shared("app", 6000, 0).obj(),
			policy: "binpack",
			want:   [][]int{{0}, {0}},
			booked: []Assignment{{GPU: 0, UUID: "GPU-n-0", Usage: Usage{MemoryMiB: 8000}}},
		},
		"a sidecar adds to the app and to later init containers": {
			// Sidecar 4000 + app 6000 = 10000; init after the sidecar runs
			// with it: 4000 + 5000 = 9000. Booked: max(10000, 9000).
			state: makeNode("n").gpus(1, "A100", 16384).state(),
			pod: makePod("p").container(Sidecar, ContainerRequest{Name: "side", MemoryMiB: 4000}).
				container(Init, ContainerRequest{Name: "init", MemoryMiB: 5000}).
				shared("app", 6000, 0).obj(),
			policy: "binpack",
			want:   [][]int{{0}, {0}, {0}},
			booked: []Assignment{{GPU: 0, UUID: "GPU-n-0", Usage: Usage{MemoryMiB: 10000}}},
		},
		"multi-GPU prefers NVLink peers over index order": {
			// GPUs 0 and 1 are not linked; 1-3 are. Two GPUs: {1,3}.
			state:  makeNode("n").gpus(4, "A100", 16384).link(1, 3).state(),
			pod:    makePod("p").whole("c", 2).obj(),
			policy: "binpack",
			want:   [][]int{{1, 3}},
		},
		"multi-GPU prefers one NUMA node": {
			state:  makeNode("n").gpus(4, "A100", 16384).numa(0, 1, 1, 0).state(),
			pod:    makePod("p").whole("c", 2).obj(),
			policy: "binpack",
			want:   [][]int{{0, 3}},
		},
		"mixed GPU sizes: the share goes where it fits": {
			state:  makeNode("n").gpus(1, "T4", 15360).gpus(1, "A100", 81920).state(),
			pod:    makePod("p").shared("c", 20000, 0).obj(),
			policy: "binpack",
			want:   [][]int{{1}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, u := mustPlacer(tc.policy).Place(tc.state, tc.pod)
			if u != nil {
				t.Fatalf("Place: unexpected unfit: %v", u)
			}
			if diff := cmp.Diff(tc.want, gpusOf(p)); diff != "" {
				t.Errorf("GPUs per container (-want,+got):\n%s", diff)
			}
			if tc.booked != nil {
				if diff := cmp.Diff(tc.booked, p.Booked); diff != "" {
					t.Errorf("booked (-want,+got):\n%s", diff)
				}
			}
		})
	}
}

func TestPlaceUnfit(t *testing.T) {
	cases := map[string]struct {
		state *NodeState
		pod   *PodRequest
		want  Insufficiency
		msg   string
	}{
		"largest free share is reported in MiB": {
			// Free: 16384-13384 = 3000 and 16384-14384 = 2000; the pod needs 3500.
			state: makeNode("n").gpus(2, "A100", 16384).state(Usage{MemoryMiB: 13384}, Usage{MemoryMiB: 14384}),
			pod:   makePod("p").shared("c", 3500, 0).obj(),
			want:  Insufficiency{Reason: ReasonGPUMemory, Container: "c", Requested: 3500, Free: 3000, Capacity: 16384, Needed: 1},
			msg:   "node n: container c: needs 1 GPU(s) with 3500 MiB free, 0 usable; largest free share on any GPU is 3000 MiB (of 16384 MiB)",
		},
		"compute is short": {
			state: makeNode("n").gpus(1, "A100", 16384).state(Usage{Compute: 80}),
			pod:   makePod("p").shared("c", 0, 30).obj(),
			want:  Insufficiency{Reason: ReasonGPUCompute, Container: "c", Requested: 30, Free: 20, Capacity: 100, Needed: 1},
		},
		"GPU too small for the request": {
			state: makeNode("n").gpus(2, "T4", 15360).state(),
			pod:   makePod("p").shared("c", 20000, 0).obj(),
			want:  Insufficiency{Reason: ReasonGPUTooSmall, Container: "c", Requested: 20000, Free: 15360, Capacity: 15360, Needed: 1},
		},
		"whole GPUs need idle GPUs": {
			state: makeNode("n").gpus(2, "A100", 16384).state(Usage{MemoryMiB: 1}),
			pod:   makePod("p").whole("c", 2).obj(),
			want:  Insufficiency{Reason: ReasonGPUNotIdle, Container: "c", Needed: 2, Usable: 1},
		},
		"more GPUs than the node has": {
			state: makeNode("n").gpus(2, "A100", 16384).state(),
			pod:   makePod("p").whole("c", 4).obj(),
			want:  Insufficiency{Reason: ReasonGPUCount, Container: "c", Needed: 4, Usable: 2},
		},
		"model not allowed": {
			state: makeNode("n").gpus(1, "T4", 15360).state(),
			pod:   makePod("p").container(App, ContainerRequest{Name: "c", MemoryMiB: 10, Models: []string{"A100"}}).obj(),
			want:  Insufficiency{Reason: ReasonModel, Container: "c", Needed: 1, Models: []string{"A100"}},
		},
		"unhealthy GPU is not used": {
			state: makeNode("n").gpus(1, "A100", 16384).unhealthy(0).state(),
			pod:   makePod("p").shared("c", 10, 0).obj(),
			want:  Insufficiency{Reason: ReasonUnhealthy, Container: "c", Needed: 1},
		},
		"whole-card node refuses shares": {
			state: makeNode("n").gpus(1, "A100", 16384).wholeCard().state(),
			pod:   makePod("p").shared("c", 10, 0).obj(),
			want:  Insufficiency{Reason: ReasonWholeCard, Container: "c"},
		},
		"CPU": {
			state: makeNode("n").cpu(1000).gpus(1, "A100", 16384).state(),
			pod:   makePod("p").cpu(2000).shared("c", 10, 0).obj(),
			want:  Insufficiency{Reason: ReasonCPU, Requested: 2000, Free: 1000, Capacity: 1000},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, u := mustPlacer("binpack").Place(tc.state, tc.pod)
			if p != nil || u == nil {
				t.Fatalf("Place: got placement %+v, want unfit", p)
			}
			if diff := cmp.Diff([]Insufficiency{tc.want}, u.Reasons); diff != "" {
				t.Errorf("reasons (-want,+got):\n%s", diff)
			}
			if tc.msg != "" && u.Error() != tc.msg {
				t.Errorf("message:\n got %q\nwant %q", u.Error(), tc.msg)
			}
		})
	}
}

func TestDiagnose(t *testing.T) {
	pl := mustPlacer("binpack")
	states := []*NodeState{
		makeNode("a").gpus(1, "A100", 16384).state(Usage{MemoryMiB: 13384}), // 3000 free
		makeNode("b").gpus(1, "A100", 16384).state(Usage{MemoryMiB: 15384}), // 1000 free
		makeNode("c").cpu(100).gpus(1, "A100", 16384).state(),
	}
	pod := makePod("p").cpu(1000).shared("c", 3500, 0).obj()
	if d := pl.Pick(states, pod, 1); d.Index != -1 {
		t.Fatalf("Pick chose %d, want none", d.Index)
	}
	got := Diagnose(5, pl.Explain(states, pod)).String()
	want := "0/5 nodes are available: 2 InsufficientGPUMemory, 1 InsufficientCPU; largest free share on any GPU is 3000 MiB, pod needs 3500 MiB."
	if got != want {
		t.Errorf("Diagnose:\n got %q\nwant %q", got, want)
	}
}

// The pod event names the numbers for too few GPUs and the allowed models
// for a model no node has, as it does for memory.
func TestDiagnoseDetail(t *testing.T) {
	pl := mustPlacer("binpack")
	states := []*NodeState{
		makeNode("a").gpus(2, "T4", 15360).state(),
		makeNode("b").gpus(1, "T4", 15360).state(),
	}
	cases := map[string]struct {
		pod  *PodRequest
		want string
	}{
		"too few GPUs": {makePod("p").whole("c", 4).obj(),
			"0/2 nodes are available: 2 TooFewGPUs; a container needs 4 GPUs, the most healthy GPUs any node has is 2."},
		"no allowed model": {makePod("p").container(App, ContainerRequest{Name: "c", MemoryMiB: 10, Models: []string{"A100", "H100"}}).obj(),
			"0/2 nodes are available: 2 GPUModelNotAllowed; pod allows GPU models A100, H100."},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Diagnose(2, pl.Explain(states, tc.pod)).String(); got != tc.want {
				t.Errorf("Diagnose:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// A withdrawn (unhealthy) GPU does not count: with one of h100's 8 GPUs
// withdrawn and a second node of 4 with one withdrawn, an 8-GPU pod is
// told the most any node has is 7, and a 4-GPU pod that h100 takes is
// placed.
func TestDiagnoseCountsHealthyGPUs(t *testing.T) {
	pl := mustPlacer("binpack")
	states := []*NodeState{
		makeNode("h100").gpus(8, "H100", 81559).unhealthy(7).state(),
		makeNode("a100").gpus(4, "A100", 40960).unhealthy(0).state(),
	}
	pod := makePod("p").whole("c", 8).obj()
	got := Diagnose(2, pl.Explain(states, pod)).String()
	want := "0/2 nodes are available: 1 GPUUnhealthy, 1 TooFewGPUs; a container needs 8 GPUs, the most healthy GPUs any node has is 7."
	if got != want {
		t.Errorf("Diagnose:\n got %q\nwant %q", got, want)
	}
	pod = makePod("p").whole("c", 5).obj()
	got = Diagnose(2, pl.Explain(states[1:], pod)).String()
	want = "0/2 nodes are available: 1 TooFewGPUs; a container needs 5 GPUs, the most healthy GPUs any node has is 3."
	if got != want {
		t.Errorf("Diagnose:\n got %q\nwant %q", got, want)
	}
}

func TestApplyRelease(t *testing.T) {
	s := makeNode("n").gpus(2, "A100", 16384).state()
	pl := mustPlacer("binpack")
	p, u := pl.Place(s, makePod("p").cpu(100).shared("c", 10000, 50).obj())
	if u != nil {
		t.Fatal(u)
	}
	if err := s.Apply(p); err != nil {
		t.Fatal(err)
	}
	// Booking it twice would put 20000 MiB on a 16384 MiB GPU.
	if err := s.Apply(p); !errors.Is(err, ErrOvercommit) {
		t.Errorf("second Apply: got %v, want ErrOvercommit", err)
	}
	if err := s.Release(p); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(p); !errors.Is(err, ErrNotBooked) {
		t.Errorf("second Release: got %v, want ErrNotBooked", err)
	}
	other := *p
	other.Node = "m"
	if err := s.Apply(&other); !errors.Is(err, ErrWrongNode) {
		t.Errorf("Apply on the wrong node: got %v, want ErrWrongNode", err)
	}
	if diff := cmp.Diff(makeNode("n").gpus(2, "A100", 16384).state(), s, cmpopts.IgnoreUnexported(NodeState{})); diff != "" {
		t.Errorf("state after release (-want,+got):\n%s", diff)
	}
}

func TestNewPlacerUnknownPolicy(t *testing.T) {
	if _, err := NewPlacer(Config{Node: "bestest"}); err == nil {
		t.Error("NewPlacer(bestest): want an error")
	}
	if _, err := NewPlacer(Config{Node: "binpack", GPU: "nope"}); err == nil {
		t.Error("NewPlacer(GPU nope): want an error")
	}
	if _, err := NewPlacer(Config{Node: "fgd"}); err == nil {
		t.Error("NewPlacer(fgd) without a workload: want an error")
	}
}

func TestRequestValidate(t *testing.T) {
	cases := map[string]ContainerRequest{
		"negative count":       {Name: "c", Count: -1, MemoryMiB: 1},
		"count past the most":  {Name: "c", Count: MaxCount + 1, Exclusive: true},
		"negative memory":      {Name: "c", MemoryMiB: -5},
		"nothing asked":        {Name: "c"},
		"compute over 100":     {Name: "c", Compute: 150},
		"whole with a share":   {Name: "c", Exclusive: true, MemoryMiB: 10},
		"negative compute too": {Name: "c", Compute: -1, MemoryMiB: 10},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if err := c.Validate(); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("Validate: got %v, want ErrInvalidRequest", err)
			}
		})
	}
}

// TestFirstFit: a FirstFit placer gives a pod the lowest-index GPUs that
// fit, as DRA's allocator does, whatever its policy would pick, and its
// node rating follows that placement.
func TestFirstFit(t *testing.T) {
	// Free: GPU0 4096 (too small), GPU1 16384, GPU2 6144: binpack would
	// pick GPU2, first fit GPU1.
	s := makeNode("n").gpus(3, "A100", 16384).state(Usage{MemoryMiB: 12288}, Usage{}, Usage{MemoryMiB: 10240})
	pod := makePod("p").shared("c", 5000, 0).obj()
	pl := mustPlacer("binpack")
	if p, unfit := pl.Place(s, pod); unfit != nil || p.Containers[0].GPUs[0].GPU != 2 {
		t.Fatalf("binpack placed %+v (%v); want GPU 2", p, unfit)
	}
	p, unfit := pl.FirstFit().Place(s, pod)
	if unfit != nil || p.Containers[0].GPUs[0].GPU != 1 {
		t.Fatalf("first fit placed %+v (%v); want GPU 1, the first with room", p, unfit)
	}
	two := makePod("q").whole("c", 2).obj()
	if p, unfit := pl.FirstFit().Place(makeNode("m").gpus(4, "A100", 16384).link(2, 3).state(Usage{MemoryMiB: 1}), two); unfit != nil ||
		p.Containers[0].GPUs[0].GPU != 1 || p.Containers[0].GPUs[1].GPU != 2 {
		t.Fatalf("first fit placed two whole GPUs on %+v (%v); want GPUs 1 and 2, NVLink aside", p, unfit)
	}
	r := pl.FirstFit().NewRater(pod, 1)
	if _, unfit := r.Rate(s); unfit != nil {
		t.Errorf("first fit rates the node unfit: %v", unfit)
	}
}
