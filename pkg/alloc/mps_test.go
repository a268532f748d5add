package alloc

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// mps marks GPUs as running an MPS server.
func (b *nodeBuilder) mps(gpus ...int) *nodeBuilder {
	for _, i := range gpus {
		b.n.GPUs[i].MPS = true
	}
	return b
}

// mpsGPUs adds a container asking count GPUs under MPS, each with mib
// and compute, as pkg/resource translates keti.com/mpsgpu.
func (b *podBuilder) mpsGPUs(name string, count int, mib, compute int64) *podBuilder {
	return b.container(App, ContainerRequest{Name: name, Count: count, MemoryMiB: mib * int64(count), Compute: compute, MPS: true})
}

// MPS requests go to MPS GPUs only, whatever the policy prefers.
func TestPlaceMPS(t *testing.T) {
	cases := map[string]struct {
		state *NodeState
		pod   *PodRequest
		want  [][]int
	}{
		"the only MPS GPU, though binpack and spread prefer others": {
			// GPU 0 is fullest (binpack's choice), GPU 2 emptiest
			// (spread's); only GPU 1 runs MPS.
			state: makeNode("n").gpus(3, "T4", 15360).mps(1).state(Usage{MemoryMiB: 8000}, Usage{MemoryMiB: 4000}, Usage{}),
			pod:   makePod("p").mpsGPUs("c", 1, 0, 10).obj(),
			want:  [][]int{{1}},
		},
		"two MPS GPUs out of four": {
			state: makeNode("n").gpus(4, "T4", 15360).mps(1, 3).state(),
			pod:   makePod("p").mpsGPUs("c", 2, 1024, 10).obj(),
			want:  [][]int{{1, 3}},
		},
		"an MPS GPU shared with a plain CUDA pod": {
			// GPU 0 holds 60% of a non-MPS pod: 60 + 10 <= 100.
			state: makeNode("n").gpus(1, "T4", 15360).mps(0).state(Usage{MemoryMiB: 4096, Compute: 60}),
			pod:   makePod("p").mpsGPUs("c", 1, 0, 10).obj(),
			want:  [][]int{{0}},
		},
	}
	for name, tc := range cases {
		for _, policy := range NodePolicies() {
			t.Run(name+"/"+policy, func(t *testing.T) {
				p, u := mustPlacer(policy).Place(tc.state, tc.pod)
				if u != nil {
					t.Fatalf("Place: %v", u)
				}
				if diff := cmp.Diff(tc.want, gpusOf(p)); diff != "" {
					t.Errorf("GPUs (-want,+got):\n%s", diff)
				}
			})
		}
	}
}

// Pods that do not ask for MPS place on a node with MPS GPUs exactly as
// on the same node without: they run as plain CUDA contexts beside the
// MPS server, and MPS neither attracts nor repels them.
func TestPlaceNonMPSUnchanged(t *testing.T) {
	type build func() *nodeBuilder
	nodes := map[string]build{
		"mixed": func() *nodeBuilder { return makeNode("n").gpus(4, "A100", 16384) },
		"MPS":   func() *nodeBuilder { return makeNode("n").gpus(2, "A100", 16384) },
	}
	used := []Usage{{MemoryMiB: 12288, Compute: 10}, {MemoryMiB: 2048}, {}, {Compute: 100, MemoryMiB: 16384}}
	pods := map[string]*PodRequest{
		"memory":  makePod("p").shared("c", 3000, 0).obj(),
		"compute": makePod("p").shared("c", 0, 50).obj(),
		"two":     makePod("p").container(App, ContainerRequest{Name: "c", Count: 2, MemoryMiB: 4096}).obj(),
		"whole":   makePod("p").whole("c", 1).obj(),
	}
	for nodeName, mk := range nodes {
		for podName, pod := range pods {
			for _, policy := range NodePolicies() {
				t.Run(nodeName+"/"+podName+"/"+policy, func(t *testing.T) {
					plain := mk()
					withMPS := mk()
					if nodeName == "mixed" {
						withMPS.mps(0, 2)
					} else {
						withMPS.mps(0, 1)
					}
					n := len(plain.n.GPUs)
					p1, u1 := mustPlacer(policy).Place(plain.state(used[:n]...), pod)
					p2, u2 := mustPlacer(policy).Place(withMPS.state(used[:n]...), pod)
					if (u1 == nil) != (u2 == nil) {
						t.Fatalf("without MPS unfit=%v, with MPS unfit=%v", u1, u2)
					}
					if u1 != nil {
						return
					}
					if diff := cmp.Diff(gpusOf(p1), gpusOf(p2)); diff != "" {
						t.Errorf("GPUs (-without MPS,+with MPS):\n%s", diff)
					}
					if p1.Score != p2.Score {
						t.Errorf("score %+v without MPS, %+v with", p1.Score, p2.Score)
					}
				})
			}
		}
	}
}

func TestPlaceUnfitMPS(t *testing.T) {
	cases := map[string]struct {
		state *NodeState
		pod   *PodRequest
		want  Insufficiency
		msg   string
	}{
		"no MPS GPU": {
			state: makeNode("n").gpus(2, "T4", 15360).state(),
			pod:   makePod("p").mpsGPUs("c", 1, 0, 10).obj(),
			want:  Insufficiency{Reason: ReasonNotMPS, Container: "c", Needed: 1, Usable: 0},
			msg:   "node n: container c: needs 1 GPU(s) under MPS, node has 0 (gpushare-node --mps)",
		},
		"one MPS GPU, two asked": {
			state: makeNode("n").gpus(2, "T4", 15360).mps(1).state(),
			pod:   makePod("p").mpsGPUs("c", 2, 0, 10).obj(),
			want:  Insufficiency{Reason: ReasonNotMPS, Container: "c", Needed: 2, Usable: 1},
		},
		"the MPS GPU is full; the idle plain GPU does not count": {
			// MPS GPU 1: 100-95 = 5% free < 10%. GPU 0 has 100% free but
			// no MPS, so the most free reported is 5, not 100.
			state: makeNode("n").gpus(2, "T4", 15360).mps(1).state(Usage{}, Usage{Compute: 95}),
			pod:   makePod("p").mpsGPUs("c", 1, 0, 10).obj(),
			want:  Insufficiency{Reason: ReasonGPUCompute, Container: "c", Requested: 10, Free: 5, Capacity: 100, Needed: 1},
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

// Pick sends an MPS pod to the MPS node, and the pending event says why
// it fits no node when none runs MPS.
func TestPickMPS(t *testing.T) {
	pod := makePod("p").mpsGPUs("c", 1, 0, 10).obj()
	for _, policy := range NodePolicies() {
		states := []*NodeState{
			makeNode("plain").gpus(2, "T4", 15360).state(),
			makeNode("mps").gpus(2, "T4", 15360).mps(0, 1).state(Usage{MemoryMiB: 15000, Compute: 90}),
		}
		if d := mustPlacer(policy).Pick(states, pod, 1); d.Index != 1 {
			t.Errorf("%s: Pick chose %d, want the MPS node (1)", policy, d.Index)
		}
	}
	pl := mustPlacer("binpack")
	states := []*NodeState{makeNode("a").gpus(2, "T4", 15360).state(), makeNode("b").gpus(1, "T4", 15360).state()}
	got := Diagnose(2, pl.Explain(states, pod)).String()
	want := "0/2 nodes are available: 2 GPUNotMPS; a container needs 1 GPUs under MPS, the most any node has is 0."
	if got != want {
		t.Errorf("Diagnose:\n got %q\nwant %q", got, want)
	}
	// More GPUs than any MPS node has: the most MPS GPUs any node has,
	// not the GPUs of a node that runs no MPS.
	five := makePod("five").mpsGPUs("c", 5, 0, 10).obj()
	states = []*NodeState{makeNode("big").gpus(8, "H100", 81559).state(), makeNode("mps").gpus(4, "T4", 15360).mps(0, 1, 2, 3).state()}
	got = Diagnose(2, pl.Explain(states, five)).String()
	want = "0/2 nodes are available: 2 GPUNotMPS; a container needs 5 GPUs under MPS, the most any node has is 4."
	if got != want {
		t.Errorf("Diagnose, 5 GPUs under MPS:\n got %q\nwant %q", got, want)
	}
}

func TestValidateMPSExclusive(t *testing.T) {
	r := ContainerRequest{Name: "c", Count: 1, Exclusive: true, MPS: true}
	if err := r.Validate(); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("Validate = %v, want ErrInvalidRequest", err)
	}
}
