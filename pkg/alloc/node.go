package alloc

import (
	"errors"
	"fmt"
)

// FullCompute is the compute capacity of one GPU, in percent.
const FullCompute = 100

// ShareMode says how a node hands out its GPUs.
type ShareMode int

const (
	// Shared nodes accept fractional and whole-GPU requests.
	Shared ShareMode = iota
	// WholeCard nodes accept only whole-GPU requests (the Aliyun system's
	// "by card or by memory, not both on one node").
	WholeCard
)

func (m ShareMode) String() string {
	if m == WholeCard {
		return "whole-card"
	}
	return "shared"
}

// GPU is one device of a node, as the node daemon reports it.
type GPU struct {
	Index     int
	UUID      string
	Model     string
	MemoryMiB int64
	// Compute is the compute capacity in percent; zero means FullCompute.
	Compute int64
	// NUMANode is the NUMA node the GPU is attached to; -1 if unknown.
	NUMANode int
	// Peers lists the indices of GPUs reachable over NVLink.
	Peers   []int
	Healthy bool
	// MPS says the GPU runs an NVIDIA MPS server (gpushare-node --mps):
	// only MPS GPUs take MPS requests. Other requests may share it too,
	// as plain CUDA contexts beside the server.
	MPS bool
}

// ComputeCapacity returns the GPU's compute capacity in percent.
func (g *GPU) ComputeCapacity() int64 {
	if g.Compute <= 0 {
		return FullCompute
	}
	return g.Compute
}

// Node is the static description of a node: what it has, not what is used.
type Node struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	Mode      ShareMode
	GPUs      []GPU
}

// Validate reports a node description the core cannot work with.
func (n *Node) Validate() error {
	var errs []error
	if n.Name == "" {
		errs = append(errs, errors.New("node name is empty"))
	}
	if n.CPUMilli < 0 || n.MemoryMiB < 0 {
		errs = append(errs, fmt.Errorf("node %q: negative CPU or memory", n.Name))
	}
	seen := make(map[int]bool, len(n.GPUs))
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Index != i {
			errs = append(errs, fmt.Errorf("node %q: gpus[%d] has index %d, want %d (GPUs must be listed in index order)", n.Name, i, g.Index, i))
		}
		if seen[g.Index] {
			errs = append(errs, fmt.Errorf("node %q: duplicate GPU index %d", n.Name, g.Index))
		}
		seen[g.Index] = true
		if g.MemoryMiB <= 0 {
			errs = append(errs, fmt.Errorf("node %q: gpu %d memory must be positive, got %d MiB", n.Name, g.Index, g.MemoryMiB))
		}
		if g.Compute < 0 {
			errs = append(errs, fmt.Errorf("node %q: gpu %d compute must not be negative", n.Name, g.Index))
		}
		for _, p := range g.Peers {
			if p < 0 || p >= len(n.GPUs) || p == i {
				errs = append(errs, fmt.Errorf("node %q: gpu %d has invalid NVLink peer %d", n.Name, g.Index, p))
			}
		}
	}
	return errors.Join(errs...)
}

// Holds reports whether u, what is booked of the GPU, is within its
// memory and compute.
func (g *GPU) Holds(u Usage) bool {
	return u.MemoryMiB <= g.MemoryMiB && u.Compute <= g.ComputeCapacity()
}

// Usage is what is booked on one GPU.
type Usage struct {
	MemoryMiB int64
	Compute   int64
}

func (u Usage) add(o Usage) Usage { return Usage{u.MemoryMiB + o.MemoryMiB, u.Compute + o.Compute} }
func (u Usage) sub(o Usage) Usage { return Usage{u.MemoryMiB - o.MemoryMiB, u.Compute - o.Compute} }
func (u Usage) max(o Usage) Usage {
	return Usage{max(u.MemoryMiB, o.MemoryMiB), max(u.Compute, o.Compute)}
}

// Live is observed usage of a GPU from the node daemon. The core does not
// judge staleness: the adapter sets Valid only for fresh samples.
type Live struct {
	Valid       bool
	MemoryMiB   int64
	Utilization int64 // percent
}

// NodeState is a node with what is booked on it. Policies read it; only
// Apply and Release change it. Its Node is never changed in place: a
// changed inventory, or a GPU's health, is a new Node.
type NodeState struct {
	Node *Node
	// CPUMilli and MemoryMiB are booked amounts.
	CPUMilli  int64
	MemoryMiB int64
	// GPUs is booked usage, parallel to Node.GPUs.
	GPUs []Usage
	// Live is optional observed usage, parallel to Node.GPUs, for
	// load-aware policies; nil when unknown.
	Live []Live
	// memo caches what policies derive from the state; nil disables it.
	memo *memo
	// On evaluate's working copies only: origin is the memo entry of the
	// state the copy was made from, and pristine says the copy still
	// equals that state (no container placed on it yet).
	origin   *memoEntry
	pristine bool
}

// NewNodeState returns an empty state for n.
func NewNodeState(n *Node) *NodeState {
	return &NodeState{Node: n, GPUs: make([]Usage, len(n.GPUs)), memo: new(memo)}
}

// Clone returns a deep copy of the booked state (the Node is shared).
func (s *NodeState) Clone() *NodeState {
	c := *s
	c.GPUs = append([]Usage(nil), s.GPUs...)
	c.memo, c.origin, c.pristine = new(memo), nil, false
	if s.Live != nil {
		c.Live = append([]Live(nil), s.Live...)
	}
	return &c
}

// FreeCPU returns unbooked milli-CPU.
func (s *NodeState) FreeCPU() int64 { return s.Node.CPUMilli - s.CPUMilli }

// FreeMemory returns unbooked node memory in MiB.
func (s *NodeState) FreeMemory() int64 { return s.Node.MemoryMiB - s.MemoryMiB }

// Free returns the unbooked memory and compute of GPU i.
func (s *NodeState) Free(i int) Usage {
	g := &s.Node.GPUs[i]
	return Usage{g.MemoryMiB - s.GPUs[i].MemoryMiB, g.ComputeCapacity() - s.GPUs[i].Compute}
}

// FreeShare returns the usable free share of GPU i in per-mille of the GPU:
// the smaller of its free memory and free compute fractions, rounded down,
// and 0 for an unhealthy GPU. 1000 means the GPU is entirely free.
func (s *NodeState) FreeShare(i int) int64 {
	return shareOf(&s.Node.GPUs[i], s.GPUs[i])
}

// Idle reports whether GPU i is healthy and has nothing booked.
func (s *NodeState) Idle(i int) bool {
	return s.Node.GPUs[i].Healthy && s.GPUs[i] == Usage{}
}

// Apply books a placement on the node. It fails, changing nothing, if the
// placement is for another node or would exceed any capacity.
func (s *NodeState) Apply(p *Placement) error { return s.apply(p, true) }

// Book is Apply for what is already bound (a pod's allocation record, an
// allocated ResourceClaim): only its GPUs can conflict. The node's CPU
// and memory are booked past their capacity if need be: pods bound there
// by spec.nodeName count toward them until the kubelet refuses them, and
// that is no reason to hold the GPUs the records name.
func (s *NodeState) Book(p *Placement) error { return s.apply(p, false) }

func (s *NodeState) apply(p *Placement, cpu bool) error {
	if err := s.checkPlacement(p); err != nil {
		return err
	}
	for _, b := range p.Booked {
		u := s.GPUs[b.GPU].add(b.Usage)
		g := &s.Node.GPUs[b.GPU]
		if !g.Holds(u) {
			return fmt.Errorf("%w: gpu %d of node %q would book %d/%d MiB and %d/%d%% compute",
				ErrOvercommit, b.GPU, s.Node.Name, u.MemoryMiB, g.MemoryMiB, u.Compute, g.ComputeCapacity())
		}
	}
	if cpu && (s.CPUMilli+p.CPUMilli > s.Node.CPUMilli || s.MemoryMiB+p.MemoryMiB > s.Node.MemoryMiB) {
		return fmt.Errorf("%w: node %q CPU or memory", ErrOvercommit, s.Node.Name)
	}
	for _, b := range p.Booked {
		s.GPUs[b.GPU] = s.GPUs[b.GPU].add(b.Usage)
	}
	s.CPUMilli += p.CPUMilli
	s.MemoryMiB += p.MemoryMiB
	return nil
}

// Release returns a placement's resources to the node. It fails, changing
// nothing, if the placement was not booked here (usage would go negative).
func (s *NodeState) Release(p *Placement) error {
	if err := s.checkPlacement(p); err != nil {
		return err
	}
	for _, b := range p.Booked {
		u := s.GPUs[b.GPU].sub(b.Usage)
		if u.MemoryMiB < 0 || u.Compute < 0 {
			return fmt.Errorf("%w: gpu %d of node %q", ErrNotBooked, b.GPU, s.Node.Name)
		}
	}
	if s.CPUMilli < p.CPUMilli || s.MemoryMiB < p.MemoryMiB {
		return fmt.Errorf("%w: node %q CPU or memory", ErrNotBooked, s.Node.Name)
	}
	for _, b := range p.Booked {
		s.GPUs[b.GPU] = s.GPUs[b.GPU].sub(b.Usage)
	}
	s.CPUMilli -= p.CPUMilli
	s.MemoryMiB -= p.MemoryMiB
	return nil
}

func (s *NodeState) checkPlacement(p *Placement) error {
	if p.Node != s.Node.Name {
		return fmt.Errorf("%w: placement is for node %q, not %q", ErrWrongNode, p.Node, s.Node.Name)
	}
	if p.CPUMilli < 0 || p.MemoryMiB < 0 {
		return fmt.Errorf("%w: negative CPU or memory", ErrOvercommit)
	}
	for _, b := range p.Booked {
		if b.GPU < 0 || b.GPU >= len(s.GPUs) {
			return fmt.Errorf("%w: node %q has no gpu %d", ErrWrongNode, s.Node.Name, b.GPU)
		}
		if b.MemoryMiB < 0 || b.Compute < 0 {
			return fmt.Errorf("%w: negative booking on gpu %d", ErrOvercommit, b.GPU)
		}
	}
	return nil
}

// Errors returned by Apply and Release; check with errors.Is.
var (
	ErrOvercommit = errors.New("booking exceeds capacity")
	ErrNotBooked  = errors.New("releasing more than is booked")
	ErrWrongNode  = errors.New("placement does not match node")
)
