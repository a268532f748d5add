package alloc

import "fmt"

// Test builders, in the style of kueue's MakeX(...).Obj().

type nodeBuilder struct{ n Node }

func makeNode(name string) *nodeBuilder {
	return &nodeBuilder{Node{Name: name, CPUMilli: 64_000, MemoryMiB: 256 << 10}}
}

// gpus adds count healthy GPUs of a model and size.
func (b *nodeBuilder) gpus(count int, model string, mib int64) *nodeBuilder {
	for range count {
		i := len(b.n.GPUs)
		b.n.GPUs = append(b.n.GPUs, GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", b.n.Name, i), Model: model, MemoryMiB: mib, Healthy: true, NUMANode: -1})
	}
	return b
}

func (b *nodeBuilder) cpu(milli int64) *nodeBuilder { b.n.CPUMilli = milli; return b }
func (b *nodeBuilder) wholeCard() *nodeBuilder      { b.n.Mode = WholeCard; return b }
func (b *nodeBuilder) unhealthy(i int) *nodeBuilder {
	b.n.GPUs[i].Healthy = false
	return b
}

// numa sets each GPU's NUMA node; links joins GPUs over NVLink.
func (b *nodeBuilder) numa(nodes ...int) *nodeBuilder {
	for i, k := range nodes {
		b.n.GPUs[i].NUMANode = k
	}
	return b
}

func (b *nodeBuilder) link(a, c int) *nodeBuilder {
	b.n.GPUs[a].Peers = append(b.n.GPUs[a].Peers, c)
	b.n.GPUs[c].Peers = append(b.n.GPUs[c].Peers, a)
	return b
}

// state returns a state with the given per-GPU bookings (memory, compute).
func (b *nodeBuilder) state(used ...Usage) *NodeState {
	n := b.n
	s := NewNodeState(&n)
	copy(s.GPUs, used)
	return s
}

type podBuilder struct{ p PodRequest }

func makePod(key string) *podBuilder { return &podBuilder{PodRequest{Key: key}} }

func (b *podBuilder) cpu(milli int64) *podBuilder { b.p.CPUMilli = milli; return b }

func (b *podBuilder) shared(name string, mib, compute int64) *podBuilder {
	return b.container(App, ContainerRequest{Name: name, MemoryMiB: mib, Compute: compute})
}

func (b *podBuilder) whole(name string, count int) *podBuilder {
	return b.container(App, ContainerRequest{Name: name, Count: count, Exclusive: true})
}

func (b *podBuilder) container(kind ContainerKind, c ContainerRequest) *podBuilder {
	b.p.Containers = append(b.p.Containers, PodContainer{ContainerRequest: c, Kind: kind})
	return b
}

func (b *podBuilder) obj() *PodRequest { p := b.p; return &p }

func mustPlacer(name string) *Placer {
	pl, err := NewPlacer(Config{Node: name, Options: Options{Seed: 1, Workload: []Shape{
		{CPUMilli: 1000, Count: 1, Demand: Demand{MemoryMiB: 4096}, Weight: 3},
		{CPUMilli: 1000, Count: 1, Demand: Demand{Exclusive: true}, Weight: 1},
	}}})
	if err != nil {
		panic(err)
	}
	return pl
}
