package alloc

import (
	"errors"
	"strings"
	"testing"
)

func TestConform(t *testing.T) {
	node := makeNode("n").gpus(2, "Tesla T4", 15360).gpus(1, "NVIDIA A100", 40960).n
	whole := makeNode("w").gpus(2, "Tesla T4", 15360).wholeCard().n
	shared := makePod("ns/a").shared("main", 4096, 30).obj()
	// 10000 MiB over 2 GPUs books ⌈10000/2⌉ = 5000 on each.
	two := makePod("ns/b").container(App, ContainerRequest{Name: "main", MemoryMiB: 10000, Count: 2}).obj()
	exclusive := makePod("ns/c").whole("main", 1).obj()
	a100Only := makePod("ns/d").container(App, ContainerRequest{Name: "main", MemoryMiB: 1024, Models: []string{"NVIDIA A100"}}).obj()
	initAndApp := makePod("ns/e").container(Init, ContainerRequest{Name: "setup", MemoryMiB: 1024}).shared("main", 2048, 0).obj()

	on := func(node string, cs ...ContainerPlacement) *Placement { return &Placement{Node: node, Containers: cs} }
	c := func(name string, kind ContainerKind, gpus ...Assignment) ContainerPlacement {
		return ContainerPlacement{Name: name, Kind: kind, GPUs: gpus}
	}
	gpu := func(i int, mib, compute int64) Assignment {
		return Assignment{GPU: i, Usage: Usage{MemoryMiB: mib, Compute: compute}}
	}
	cases := map[string]struct {
		p    *Placement
		pod  *PodRequest
		n    *Node
		want string // "" conforms; else a part of the error
	}{
		"shared as asked":               {on("n", c("main", App, gpu(0, 4096, 30))), shared, &node, ""},
		"shared, more memory":           {on("n", c("main", App, gpu(0, 15360, 30))), shared, &node, "books 15360 MiB and 30% compute, the container asks for 4096 MiB and 30%"},
		"shared, more compute":          {on("n", c("main", App, gpu(0, 4096, 100))), shared, &node, "asks for 4096 MiB and 30%"},
		"shared, less memory":           {on("n", c("main", App, gpu(0, 1, 30))), shared, &node, "books 1 MiB"},
		"two GPUs as asked":             {on("n", c("main", App, gpu(0, 5000, 0), gpu(1, 5000, 0))), two, &node, ""},
		"two GPUs, one given":           {on("n", c("main", App, gpu(0, 10000, 0))), two, &node, "gets 1 GPUs, it asks for 2"},
		"the same GPU twice":            {on("n", c("main", App, gpu(0, 5000, 0), gpu(0, 5000, 0))), two, &node, "GPU 0 twice"},
		"whole GPU as asked":            {on("n", c("main", App, gpu(2, 40960, 100))), exclusive, &node, ""},
		"whole GPU, booked as a share":  {on("n", c("main", App, gpu(2, 1024, 10))), exclusive, &node, "the whole GPU is 40960 MiB and 100%"},
		"whole GPU on a vanished GPU":   {on("n", c("main", App, gpu(7, 40960, 100))), exclusive, &node, ""},
		"nothing on a vanished GPU":     {on("n", c("main", App, gpu(7, 0, 0))), exclusive, &node, "of a whole GPU"},
		"model allowed":                 {on("n", c("main", App, gpu(2, 1024, 0))), a100Only, &node, ""},
		"model not allowed":             {on("n", c("main", App, gpu(0, 1024, 0))), a100Only, &node, "is a Tesla T4, the container allows [NVIDIA A100]"},
		"a share on a whole-card node":  {on("w", c("main", App, gpu(0, 4096, 30))), shared, &whole, "hands out whole GPUs only"},
		"another container name":        {on("n", c("other", App, gpu(0, 4096, 30))), shared, &node, `is app "other", the pod's is app "main"`},
		"a container the pod lacks":     {on("n", c("main", App, gpu(0, 4096, 30)), c("extra", App, gpu(1, 4096, 30))), shared, &node, "names 2 GPU containers, the pod has 1"},
		"no containers":                 {on("n"), shared, &node, "names 0 GPU containers"},
		"init container as app":         {on("n", c("setup", App, gpu(0, 1024, 0)), c("main", App, gpu(0, 2048, 0))), initAndApp, &node, `is app "setup", the pod's is init "setup"`},
		"init and app as asked":         {on("n", c("setup", Init, gpu(0, 1024, 0)), c("main", App, gpu(1, 2048, 0))), initAndApp, &node, ""},
		"shape only without the node":   {on("n", c("main", App, gpu(9, 4096, 30))), shared, nil, ""},
		"shape still checked, no node":  {on("n", c("main", App, gpu(9, 4097, 30))), shared, nil, "books 4097 MiB"},
		"exclusive, no node, not whole": {on("n", c("main", App, gpu(0, 0, 100))), exclusive, nil, "books 0 MiB and 100% compute of a whole GPU"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Conform(tc.p, tc.pod, tc.n)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Conform: %v, want nil", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Conform: nil, want an error with %q", tc.want)
			case tc.want != "" && !errors.Is(err, ErrNonconforming):
				t.Fatalf("Conform: %v is not ErrNonconforming", err)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Conform: %v, want %q in it", err, tc.want)
			}
		})
	}
}

// TestConformPlaced: whatever Place chooses conforms, on every policy.
func TestConformPlaced(t *testing.T) {
	node := makeNode("n").gpus(4, "Tesla T4", 15360).n
	pods := []*PodRequest{
		makePod("ns/a").shared("main", 4096, 30).obj(),
		makePod("ns/b").container(App, ContainerRequest{Name: "main", MemoryMiB: 10001, Count: 3}).obj(),
		makePod("ns/c").whole("main", 2).obj(),
		makePod("ns/e").container(Init, ContainerRequest{Name: "setup", MemoryMiB: 1024}).container(Sidecar, ContainerRequest{Name: "side", MemoryMiB: 512}).shared("main", 2048, 20).obj(),
	}
	for _, policy := range []string{"binpack", "spread", "random", "bestfit", "fgd", "fgd-pack", "fgd-fill"} {
		pl := mustPlacer(policy)
		for _, pod := range pods {
			s := NewNodeState(&node)
			p, unfit := pl.Place(s, pod)
			if unfit != nil {
				t.Fatalf("%s: %s does not fit: %v", policy, pod.Key, unfit)
			}
			if err := Conform(p, pod, &node); err != nil {
				t.Errorf("%s: placement of %s does not conform: %v", policy, pod.Key, err)
			}
		}
	}
}
