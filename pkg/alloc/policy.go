package alloc

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Score rates a placement; higher is better. Scores compare by Primary,
// then Secondary. Policies use Secondary as an informed tie-break (for
// example, the node's size among placements that fragment equally) so that
// exact ties are rare and mean "equivalent".
type Score struct {
	Primary   int64
	Secondary int64
}

// Compare returns -1, 0 or +1 as a is worse than, equal to or better than b.
// It compares, never subtracts: scores span all of int64 (the extremes
// serve as "always first" and "always last").
func (a Score) Compare(b Score) int {
	return cmp.Or(cmp.Compare(a.Primary, b.Primary), cmp.Compare(a.Secondary, b.Secondary))
}

// NodeScorer rates a placement of pod on a node, given the node's state
// before and after it. Implementations must not change either state.
type NodeScorer interface {
	ScoreNode(before, after *NodeState, pod *PodRequest) Score
}

// GPUScorer rates each candidate GPU for one GPU's worth of a container's
// demand d: scores[k] for GPU candidates[k], higher is better. Candidates
// all fit d. A load-aware scorer reads s.Live.
type GPUScorer interface {
	ScoreGPUs(s *NodeState, pod *PodRequest, d Demand, candidates []int, scores []int64)
}

// Options are the inputs a policy may need.
type Options struct {
	// Seed drives the random policy and node tie-breaks.
	Seed uint64
	// Workload is the expected mix of pod shapes, for fragmentation-aware
	// policies.
	Workload []Shape
	// Mix is the whole workload of which Workload may keep only the
	// heaviest shapes, for fgd-robust's supply signal: a demand bound to
	// a scarce model can be too rare to be among the heaviest shapes and
	// still need every GPU of that model. Empty means Workload.
	Mix []Shape
	// Supply is the cluster's healthy GPUs per kind and what is free of
	// them (SupplyOf, SupplyLeft), for fgd-robust: it weighs model-bound
	// demand against the free share of the GPUs that admit it.
	Supply []Supply
	// Spare, when set, keeps idle GPUs spare for whole-GPU pods: a
	// container asking part of a GPU does not break an idle GPU whose
	// node would then feed fewer of them. Nil places such containers
	// wherever they fit.
	Spare *Spare
}

// Config names the policies of a Placer.
type Config struct {
	// Node is the node-level policy name (see NodePolicies).
	Node string
	// GPU is the GPU-level policy name (see GPUPolicies); empty means the
	// same name as Node.
	GPU string
	// NoTopology turns off NVLink/NUMA preference for multi-GPU requests.
	NoTopology bool
	Options
}

type (
	nodeFactory func(Options) (NodeScorer, error)
	gpuFactory  func(Options) (GPUScorer, error)
)

// The registries are read-only after initialisation.
var (
	nodePolicies = map[string]nodeFactory{
		"binpack": func(Options) (NodeScorer, error) { return binpack{}, nil },
		"spread":  func(Options) (NodeScorer, error) { return spread{}, nil },
		"bestfit": func(Options) (NodeScorer, error) { return bestFit{}, nil },
		"random":  func(o Options) (NodeScorer, error) { return random{seed: o.Seed}, nil },
		"fgd":     func(o Options) (NodeScorer, error) { return newFGD(o, fgdPlain) },
		"fgd-pack": func(o Options) (NodeScorer, error) {
			return newFGD(o, fgdPack)
		},
		"fgd-fill":   func(o Options) (NodeScorer, error) { return newFGD(o, fgdFill) },
		"fgd-robust": func(o Options) (NodeScorer, error) { return newFGD(o, fgdRobust) },
		"load-aware": func(Options) (NodeScorer, error) { return loadAware{}, nil },
	}
	gpuPolicies = map[string]gpuFactory{
		"binpack":    func(Options) (GPUScorer, error) { return binpack{}, nil },
		"bestfit":    func(Options) (GPUScorer, error) { return binpack{}, nil },
		"spread":     func(Options) (GPUScorer, error) { return spread{}, nil },
		"random":     func(o Options) (GPUScorer, error) { return random{seed: o.Seed}, nil },
		"fgd":        func(o Options) (GPUScorer, error) { return newFGD(o, fgdPlain) },
		"fgd-pack":   func(o Options) (GPUScorer, error) { return newFGD(o, fgdPack) },
		"fgd-fill":   func(o Options) (GPUScorer, error) { return newFGD(o, fgdFill) },
		"fgd-robust": func(o Options) (GPUScorer, error) { return newFGD(o, fgdRobust) },
		"load-aware": func(Options) (GPUScorer, error) { return loadAware{}, nil },
	}
)

// NodePolicies lists the node-level policy names, sorted.
func NodePolicies() []string { return sortedKeys(nodePolicies) }

// GPUPolicies lists the GPU-level policy names, sorted.
func GPUPolicies() []string { return sortedKeys(gpuPolicies) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// NewPlacer builds a Placer from policy names; an unknown name is an error.
func NewPlacer(c Config) (*Placer, error) {
	nf, ok := nodePolicies[c.Node]
	if !ok {
		return nil, fmt.Errorf("unknown node policy %q (known: %s)", c.Node, strings.Join(NodePolicies(), ", "))
	}
	gpuName := c.GPU
	if gpuName == "" {
		gpuName = c.Node
	}
	gf, ok := gpuPolicies[gpuName]
	if !ok {
		return nil, fmt.Errorf("unknown GPU policy %q (known: %s)", gpuName, strings.Join(GPUPolicies(), ", "))
	}
	ns, err := nf(c.Options)
	if err != nil {
		return nil, fmt.Errorf("node policy %q: %w", c.Node, err)
	}
	// One policy at both levels is one value, so that what it derives
	// from a node (see memo) serves both.
	gs, same := ns.(GPUScorer)
	if !same || gpuName != c.Node {
		if gs, err = gf(c.Options); err != nil {
			return nil, fmt.Errorf("GPU policy %q: %w", gpuName, err)
		}
	}
	pl := &Placer{cfg: c, node: ns, gpu: gs, topology: !c.NoTopology, byShape: (ratesShape(ns) || keysName(ns)) && (ratesShape(gs) || keysName(gs)), renames: keysName(ns),
		scratch: &sync.Pool{New: func() any { return new(scratch) }}}
	pl.bounder, _ = ns.(bounder)
	if pl.byShape {
		pl.shapes = &sync.Pool{New: func() any { return make(map[uint64]shapeRating) }}
	}
	return pl, nil
}

// Reweigh returns a Placer of pl's policies weighing workload, part of
// mix (see Options.Mix), instead of pl's: the workload learner's refresh.
// A fragmentation-aware policy whose new shapes ask the same GPU demands
// keeps using what pl's derived from the nodes (it depends on the demands
// alone), so the first decisions after a refresh do not derive it again
// on every node.
func (pl *Placer) Reweigh(workload, mix []Shape) (*Placer, error) {
	c := pl.cfg
	c.Workload, c.Mix = workload, mix
	return pl.successor(c)
}

// Resupply returns a Placer of pl's policies and workload for a cluster
// whose GPUs per kind are supply: nodes joined, left or lost GPUs. Like
// Reweigh, it keeps what pl derived from the nodes.
//
// Only fgd-robust weighs the supply: next shares pl's other policies,
// and its fgd-robust shares the old one's shapes, what it derived from
// them and the nodes' memos, fragmentation sums included. Rebuilding
// them took most of a refresh, which the scheduler makes every
// workload.SupplyRefresh pods while some demand is bound to models.
func (pl *Placer) Resupply(supply []Supply) (*Placer, error) {
	next := *pl
	next.cfg.Supply = supply
	f, _ := pl.node.(*fgd)
	var n *fgd
	if f != nil {
		n = f.resupplied(next.cfg.Options)
		next.node, next.bounder = n, n
	}
	if g, ok := pl.gpu.(*fgd); ok {
		if g == f {
			next.gpu = n // one policy at both levels is one value
		} else {
			next.gpu = g.resupplied(next.cfg.Options)
		}
	}
	return &next, nil
}

// Sparing returns a Placer of pl's policies that keeps idle GPUs spare
// as s says, or none when s is nil. It keeps what pl derived from the
// nodes.
func (pl *Placer) Sparing(s *Spare) *Placer {
	next := *pl
	next.cfg.Spare = s
	return &next
}

// Spare returns what pl keeps idle GPUs spare by, nil if it keeps none.
func (pl *Placer) Spare() *Spare { return pl.cfg.Spare }

// Mix returns the whole mix pl weighs (Options.Mix, else Workload).
func (pl *Placer) Mix() []Shape {
	if len(pl.cfg.Mix) > 0 {
		return pl.cfg.Mix
	}
	return pl.cfg.Workload
}

// Supply returns the supply pl weighs.
func (pl *Placer) Supply() []Supply { return pl.cfg.Supply }

// Pressed reports whether pl's policies weigh some demand bound to GPU
// models against its supply: only then does what is free of each model
// change its decisions.
func (pl *Placer) Pressed() bool {
	for _, p := range []any{pl.node, pl.gpu} {
		if f, ok := p.(*fgd); ok && len(f.pressed) > 0 {
			return true
		}
	}
	return false
}

func (pl *Placer) successor(c Config) (*Placer, error) {
	next, err := NewPlacer(c)
	if err != nil {
		return nil, err
	}
	if n, ok := next.node.(*fgd); ok {
		if p, ok := pl.node.(*fgd); ok {
			n.inherit(p)
		}
	}
	if n, ok := next.gpu.(*fgd); ok {
		if p, ok := pl.gpu.(*fgd); ok {
			n.inherit(p)
		}
	}
	return next, nil
}

// PodPolicies are the policies a pod may ask for itself, at node level,
// GPU level or both (HAMi's hami.io/node-scheduler-policy and
// hami.io/gpu-scheduler-policy): the stateless ones, which need nothing
// derived from the cluster.
var PodPolicies = []string{"binpack", "spread"}

// Override returns a Placer of pl's configuration with the node policy,
// the GPU policy or both replaced ("" keeps pl's) by one of PodPolicies.
// The other level keeps pl's policy, and what it derived from the nodes.
func (pl *Placer) Override(node, gpu string) (*Placer, error) {
	c := pl.cfg
	if c.GPU == "" {
		c.GPU = c.Node
	}
	for _, p := range []struct{ level, name string }{{"node", node}, {"GPU", gpu}} {
		if p.name != "" && !slices.Contains(PodPolicies, p.name) {
			return nil, fmt.Errorf("%s policy %q cannot be asked by a pod (allowed: %s)", p.level, p.name, strings.Join(PodPolicies, ", "))
		}
	}
	if node != "" {
		c.Node = node
	}
	if gpu != "" {
		c.GPU = gpu
	}
	return pl.successor(c)
}
