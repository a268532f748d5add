package alloc

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Supply is how many healthy GPUs of one kind (model and memory) a
// cluster has, and how much of them is free. fgd-robust weighs the demand
// bound to some models against their supply: where few GPUs admit much of
// the workload, pods that could go elsewhere should leave those GPUs free.
type Supply struct {
	Model     string
	MemoryMiB int64
	GPUs      int64
	// Free is the GPUs' free share (NodeState.FreeShare) summed, in
	// per-mille of a GPU: 1000 per idle GPU. A supply whose kinds all
	// have none free is weighed by GPUs alone.
	Free int64
	// CPUMilli is the CPU of the nodes these GPUs are on, each node's
	// shared among its healthy GPUs: fgd-robust compares the CPU the
	// pods ask per GPU with what the cluster has. A node that reports no
	// CPU counts as the adapter's stand-in for unlimited (1<<40 milli),
	// so the cluster is never short of CPU then. 0 when not counted.
	CPUMilli int64
}

// CompareSupply orders supplies by model, then memory.
func CompareSupply(a, b Supply) int {
	return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.MemoryMiB, b.MemoryMiB))
}

// SupplyOf counts the nodes' healthy GPUs per kind, all free (nothing
// booked), sorted by CompareSupply.
func SupplyOf(nodes []*Node) []Supply {
	var out []Supply
	for _, n := range nodes {
		out = countGPUs(out, n)
	}
	for _, n := range nodes {
		addNode(out, n, nil)
	}
	return out
}

// SupplyLeft is SupplyOf for the nodes' states: each kind's Free is what
// their bookings leave.
func SupplyLeft(states []*NodeState) []Supply {
	var out []Supply
	for _, s := range states {
		out = countGPUs(out, s.Node)
	}
	for _, s := range states {
		AddFree(out, s)
	}
	return out
}

// AddFree adds what s's node brings to the kinds of supply (sorted by
// CompareSupply) its healthy GPUs are of: their free share, and the
// node's CPU shared among them. A kind supply lacks is skipped.
func AddFree(supply []Supply, s *NodeState) { addNode(supply, s.Node, s) }

// addNode adds n's healthy GPUs' share of its CPU to supply's kinds, and
// their free share in s, or all of it when s is nil.
func addNode(supply []Supply, n *Node, s *NodeState) {
	var healthy int64
	for i := range n.GPUs {
		if n.GPUs[i].Healthy {
			healthy++
		}
	}
	if healthy == 0 {
		return
	}
	k := -1 // the kind of the GPU before, most often this one's
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !g.Healthy {
			continue
		}
		if k < 0 || supply[k].Model != g.Model || supply[k].MemoryMiB != g.MemoryMiB {
			var ok bool
			if k, ok = slices.BinarySearchFunc(supply, Supply{Model: g.Model, MemoryMiB: g.MemoryMiB}, CompareSupply); !ok {
				k = -1
				continue
			}
		}
		free := int64(1000)
		if s != nil {
			free = s.FreeShare(i)
		}
		supply[k].Free += free
		supply[k].CPUMilli += n.CPUMilli / healthy
	}
}

// countGPUs adds n's healthy GPUs to supply, sorted by CompareSupply,
// with nothing free.
func countGPUs(supply []Supply, n *Node) []Supply {
	k := -1 // the kind of the GPU before, most often this one's
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !g.Healthy {
			continue
		}
		if k < 0 || supply[k].Model != g.Model || supply[k].MemoryMiB != g.MemoryMiB {
			kind := Supply{Model: g.Model, MemoryMiB: g.MemoryMiB}
			var found bool
			if k, found = slices.BinarySearchFunc(supply, kind, CompareSupply); !found {
				supply = slices.Insert(supply, k, kind)
			}
		}
		supply[k].GPUs++
	}
	return supply
}

// bound is the demand bound to one set of GPU models: the models and
// its pressure (see pressures).
type bound struct {
	models   []string
	pressure int64
}

// pressures returns, per set of models some of mix's shapes are bound to,
// how scarce the GPUs that admit them are for the share of the workload
// that needs them, in per-mille: the shapes' share of mix's GPU demand
// over the share of the cluster's free GPU share on the models they admit
// (1000: as much free as the pods still to come need on average, if they
// keep arriving in the mix until the cluster is full). An empty cluster
// weighs the supply's GPUs; as pods that could go anywhere take a model's
// GPUs, the pressure on what is left of it rises. Sets whose GPUs the
// cluster lacks, or that every GPU admits, are left out: they draw on no
// node, or on every node alike. Shapes every model admits count in the
// demand only.
func pressures(mix []Shape, supply []Supply) []bound {
	var total, free int64
	for _, s := range supply {
		total += s.GPUs
		free += s.Free
	}
	if total == 0 {
		return nil
	}
	// freeOf is the free share weighed for a kind: its GPUs' when no
	// kind reports any free (a full cluster, or a supply that does not
	// say).
	freeOf := func(s *Supply) int64 { return s.Free }
	if free == 0 {
		freeOf = func(s *Supply) int64 { return s.GPUs * 1000 }
		free = total * 1000
	}
	type group struct {
		models   []string
		admitted int64
		free     int64 // the free share of the GPUs it admits
		largest  int64 // the largest memory of a GPU it admits
		demand   float64
	}
	var groups []group
	index := make(map[string]int) // a set of models' key: its group
	var all float64
	for q := range mix {
		d := &mix[q].Demand
		if mix[q].Count <= 0 || mix[q].Weight <= 0 {
			continue
		}
		key := modelsKey(d.Models)
		k, ok := index[key]
		if !ok {
			g := group{models: d.Models}
			for i := range supply {
				if s := &supply[i]; allows(d.Models, s.Model) {
					g.admitted += s.GPUs
					g.free += freeOf(s)
					g.largest = max(g.largest, s.MemoryMiB)
				}
			}
			groups = append(groups, g)
			k = len(groups) - 1
			index[key] = k
		}
		share := float64(demandShare(d, groups[k].largest))
		v := float64(mix[q].Weight) * float64(mix[q].Count) * max(share, 1)
		groups[k].demand += v
		all += v
	}
	var out []bound
	for _, g := range groups {
		if g.admitted > 0 && g.admitted < total && all > 0 {
			// A set with less than one GPU free is weighed as if it had
			// one: the pressure stays finite, and far above the
			// threshold. A pressure that rounds to 0 stays listed: it
			// rises as its models' GPUs fill (Placer.Pressed).
			p := min(1000*g.demand/all*float64(free)/float64(max(g.free, 1000)), maxPressure)
			out = append(out, bound{models: g.models, pressure: int64(p)})
		}
	}
	return out
}

// modelsKey names a set of models, whatever their order and repeats:
// two lists name the same models when their keys are equal. Each name is
// prefixed by its length, so no name's bytes can pass for a separator.
func modelsKey(models []string) string {
	switch len(models) {
	case 0:
		return ""
	case 1:
		return strconv.Itoa(len(models[0])) + ":" + models[0]
	}
	var b strings.Builder
	for _, m := range slices.Compact(slices.Sorted(slices.Values(models))) {
		b.WriteString(strconv.Itoa(len(m)))
		b.WriteByte(':')
		b.WriteString(m)
	}
	return b.String()
}

// modelPressures returns the pressure on a GPU of each model of supply:
// the sum of the bound demands' that admit it.
func modelPressures(bounds []bound, supply []Supply) map[string]int64 {
	if len(bounds) == 0 {
		return nil
	}
	out := make(map[string]int64, len(supply))
	for _, s := range supply {
		var p int64
		for i := range bounds {
			if allows(bounds[i].models, s.Model) {
				p += bounds[i].pressure
			}
		}
		out[s.Model] = p
	}
	return out
}

// pressureOn is the pressure on node n's GPUs: the sum of the bound
// demands' that one of its healthy GPUs admits.
func (f *fgd) pressureOn(n *Node) int64 {
	if len(f.pressed) == 0 {
		return 0
	}
	// Most nodes have GPUs of one model: one lookup.
	model, one := "", true
	for i := range n.GPUs {
		switch g := &n.GPUs[i]; {
		case !g.Healthy:
		case model == "":
			model = g.Model
		case g.Model != model:
			one = false
		}
	}
	if model == "" {
		return 0
	}
	if p, ok := f.byModel[model]; ok && one {
		return p
	}
	var p int64
	for i := range f.pressed {
		b := &f.pressed[i]
		if slices.ContainsFunc(n.GPUs, func(g GPU) bool { return g.Healthy && allows(b.models, g.Model) }) {
			p += b.pressure
		}
	}
	return p
}

// scarcityOf returns, per model of supply, how few GPUs the cluster has
// of it against its most plentiful model, on the pressure's per-mille
// scale but small beside it: 0 for the most plentiful, 63 for a model of
// almost none. Nil with fewer than two models.
func scarcityOf(supply []Supply) map[string]int64 {
	gpus := map[string]int64{}
	var most int64
	for _, s := range supply {
		gpus[s.Model] += s.GPUs
		most = max(most, gpus[s.Model])
	}
	if most == 0 || len(gpus) < 2 {
		return nil
	}
	out := make(map[string]int64, len(gpus))
	for m, n := range gpus {
		out[m] = 63 - 63*n/most
	}
	return out
}

// scarcityOn is the scarcity of n's scarcest healthy model (scarcityOf),
// 0 without one.
func (f *fgd) scarcityOn(n *Node) int64 {
	if f.scarcity == nil {
		return 0
	}
	// Most nodes have GPUs of one model: one lookup.
	var most int64
	model := ""
	for i := range n.GPUs {
		if g := &n.GPUs[i]; g.Healthy && g.Model != model {
			model = g.Model
			most = max(most, f.scarcity[model])
		}
	}
	return most
}

// maxPressure caps a pressure (per-mille): a thousand times as much
// demand as free share keeps the penalty far from overflowing the score.
const maxPressure = 1e6

// The supply penalty: a pod placed on a node whose pressure p exceeds
// supplyThreshold grows the node's fragmentation by what it spends there
// times (p - supplyThreshold) x supplyWeight, all per-mille. Learned
// online on the openb gpuspec workloads (seeds 42-51), pressures from
// the free share and the share a pod's CPU strands counted took the
// unallocated GPU % from 4.61/4.69/4.84/7.41 (gpuspec10/20/25/33;
// pressures from the GPUs alone, threshold 250) to 4.51/4.57/4.72/5.62 at
// 250 and 4.50/4.61/4.73/5.45 at 200; 150 and 100 went further on
// gpuspec33 (5.36, 5.31) at up to 0.03 and 0.06 points on the others
// against 200, and so did weight 2000 or 4000 (5.35-5.41, gpuspec20
// 4.66-4.68). Workloads without model-bound pods do not change.
const (
	supplyThreshold = 200
	supplyWeight    = 1000
)
