package cache_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/record"
)

func TestNodeFrom(t *testing.T) {
	inv := inventory("n1", gpusharev1.ModeWholeCard, 40960, 81920)
	inv.GPUs[0].NUMANode = 1
	inv.GPUs[0].NVLinkPeers = []int{1}
	inv.GPUs[1].NVLinkPeers = []int{0}
	inv.GPUs[1].Healthy = false
	inv.GPUs[1].Model = "other"
	inv.GPUs[1].MPS = true
	inv.GPUs[1].UsableMemoryMiB = 81000 // 920 MiB reserved: the core books against 81000
	n := inventoryNode(t, "n1", inv)
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse("15500m"),
		corev1.ResourceMemory: k8sresource.MustParse("1025Mi")}
	n.Status.Allocatable[corev1.ResourceMemory] = *k8sresource.NewQuantity(1025<<20+1, k8sresource.BinarySI)
	got, err := record.NodeFrom(n)
	if err != nil {
		t.Fatal(err)
	}
	// Memory rounds up: the core never refuses what kube-scheduler takes.
	want := &alloc.Node{Name: "n1", Mode: alloc.WholeCard, CPUMilli: 15500, MemoryMiB: 1026}
	for _, g := range inv.GPUs {
		want.GPUs = append(want.GPUs, alloc.GPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.Usable(),
			Healthy: g.Healthy, NUMANode: g.NUMANode, Peers: g.NVLinkPeers, MPS: g.MPS})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NodeFrom (-want +got):\n%s", diff)
	}

	for _, mode := range []gpusharev1.Mode{gpusharev1.ModeShared, ""} {
		got, err := record.NodeFrom(inventoryNode(t, "n1", inventory("n1", mode, 1024)))
		if err != nil {
			t.Fatal(err)
		}
		if got.Mode != alloc.Shared {
			t.Errorf("mode %q gives %v, want %v", mode, got.Mode, alloc.Shared)
		}
		// No allocatable CPU or memory: kube-scheduler judges them alone.
		if got.CPUMilli != record.Unlimited || got.MemoryMiB != record.Unlimited {
			t.Errorf("no allocatable: CPU %d, memory %d, want both %d", got.CPUMilli, got.MemoryMiB, record.Unlimited)
		}
	}
}

// fullNode returns the alloc view of a four-GPU test node.
func fullNode(t *testing.T) *alloc.Node {
	t.Helper()
	n, err := record.NodeFrom(gpuNode(t, "n1", 16384, 16384, 16384, 16384))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// placed places a pod with an init container, a sidecar and two app
// containers (one on two GPUs) on a fresh state of node.
func placed(t *testing.T, node *alloc.Node) *alloc.Placement {
	t.Helper()
	placer, err := alloc.NewPlacer(alloc.Config{Node: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	pod := &alloc.PodRequest{Key: "default/p", Containers: []alloc.PodContainer{
		{Kind: alloc.Init, ContainerRequest: alloc.ContainerRequest{Name: "init", MemoryMiB: 12000, Compute: 10}},
		{Kind: alloc.Sidecar, ContainerRequest: alloc.ContainerRequest{Name: "proxy", MemoryMiB: 1000, Compute: 5}},
		{Kind: alloc.App, ContainerRequest: alloc.ContainerRequest{Name: "train", MemoryMiB: 8000, Compute: 40, Count: 2}},
		{Kind: alloc.App, ContainerRequest: alloc.ContainerRequest{Name: "whole", Count: 1, Exclusive: true}},
	}}
	p, unfit := placer.Place(alloc.NewNodeState(node), pod)
	if unfit != nil {
		t.Fatalf("Place: %v", unfit)
	}
	return p
}

func TestRecordPlacementFromRoundTrip(t *testing.T) {
	node := fullNode(t)
	p := placed(t, node)

	a := record.Record(p)
	if a.Node != p.Node || len(a.Containers) != len(p.Containers) {
		t.Fatalf("Record = %+v, want node %s and %d containers", a, p.Node, len(p.Containers))
	}
	wantKinds := map[alloc.ContainerKind]gpusharev1.ContainerKind{
		alloc.App: gpusharev1.ContainerApp, alloc.Init: gpusharev1.ContainerInit, alloc.Sidecar: gpusharev1.ContainerSidecar}
	for i, c := range p.Containers {
		rc := a.Containers[i]
		if rc.Name != c.Name || rc.Kind != wantKinds[c.Kind] || len(rc.GPUs) != len(c.GPUs) {
			t.Errorf("container %d recorded as %+v, from %+v", i, rc, c)
			continue
		}
		for j, g := range c.GPUs {
			want := gpusharev1.GPUShare{Index: g.GPU, UUID: g.UUID, MemoryMiB: g.MemoryMiB, Compute: g.Compute}
			if rc.GPUs[j] != want {
				t.Errorf("container %s GPU %d recorded as %+v, want %+v", c.Name, j, rc.GPUs[j], want)
			}
		}
	}

	// Through the annotation and back.
	value, err := gpusharev1.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := gpusharev1.ParseAllocation(value)
	if err != nil {
		t.Fatalf("ParseAllocation(Record(p)): %v", err)
	}
	for _, n := range []*alloc.Node{node, nil} {
		got, err := record.PlacementFrom(parsed, n)
		if err != nil {
			t.Fatalf("PlacementFrom(node %v): %v", n != nil, err)
		}
		if got.Node != p.Node {
			t.Errorf("Node = %s, want %s", got.Node, p.Node)
		}
		if diff := cmp.Diff(p.Containers, got.Containers); diff != "" {
			t.Errorf("containers changed in the round trip (-placed +read):\n%s", diff)
		}
		if diff := cmp.Diff(p.Booked, got.Booked); diff != "" {
			t.Errorf("booking changed in the round trip (-placed +read):\n%s", diff)
		}
	}
}

func TestPlacementFromChecksNode(t *testing.T) {
	node := fullNode(t)
	tests := []struct {
		name   string
		mutate func(*gpusharev1.Allocation)
		want   string
	}{
		{"another node", func(a *gpusharev1.Allocation) { a.Node = "n2" }, "allocation is for node n2, not n1"},
		{"foreign UUID", func(a *gpusharev1.Allocation) { a.Containers[0].GPUs[0].UUID = "GPU-x" }, "no GPU 0 with UUID GPU-x"},
		{"index past the node's", func(a *gpusharev1.Allocation) { a.Containers[0].GPUs[0].Index = 4 }, "no GPU 4"},
		{"negative index", func(a *gpusharev1.Allocation) { a.Containers[0].GPUs[0].Index = -1 }, "no GPU -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 1024, 10)})
			tc.mutate(a)
			p, err := record.PlacementFrom(a, node)
			if err == nil {
				t.Fatalf("PlacementFrom = %+v, want an error", p)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}
