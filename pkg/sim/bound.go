package sim

import (
	"cmp"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/pkg/trace"
)

// gpuMilli is one GPU in the trace's units.
const gpuMilli = 1000

// maxBoundModels bounds the GPU models the bound tells apart; a cluster
// with more is bounded by GPU sizes alone (still a bound, a weaker one).
const maxBoundModels = 12

// Bound returns a lower bound on the unallocated share of the cluster's
// GPUs, in % of capacity, once pods (indexes into w.Pods) have arrived: no
// placement of those pods, online or offline, leaves less unallocated.
//
// It relaxes placement to GPU sizes and models: a pod of one share is an
// item of its share on one GPU of a model it admits, a pod of k whole GPUs
// is k whole-GPU items; CPU, memory and which node holds a multi-GPU pod
// are left out. The most those items can fill is bounded with dual
// feasible functions (Fekete and Schepers): a function f of an item's
// size such that items that fit one GPU together have f summing to at
// most one GPU. Then the items placed on a set of GPUs have f summing to
// at most that many GPUs, so the share placed is at most a fractional
// knapsack's, taken greedily by share per unit of f. Items bound to models
// share only their GPUs: every set of models caps the items bound inside
// it, and the greedy stays exact (the caps form a polymatroid). The bound
// is the least of the knapsacks over a family of such functions.
//
// An 810-milli share leaves 190 that only a pod of 190 or less can use:
// the function that counts it as a whole GPU and shares under 191 as
// nothing is what catches it.
func Bound(w *Workload, pods []int) float64 {
	models := boundModels(w)
	capacity := make([]int64, len(models.names))
	var total int64
	for _, n := range w.Nodes {
		total += int64(n.GPUs)
		if k, ok := models.index[n.Model]; ok {
			capacity[k] += int64(n.GPUs)
		}
	}
	if total == 0 {
		return 0
	}
	items := boundItems(w, pods, models)
	best := knapsackBound(items, capacity)
	return max(0, 100*(float64(total*gpuMilli)-best)/float64(total*gpuMilli))
}

// boundModelSet names the cluster's GPU models, one bit each.
type boundModelSet struct {
	names []string
	index map[string]int
}

func boundModels(w *Workload) boundModelSet {
	var names []string
	for _, n := range w.Nodes {
		if n.GPUs > 0 && !slices.Contains(names, n.Model) {
			names = append(names, n.Model)
		}
	}
	slices.Sort(names)
	if len(names) > maxBoundModels {
		names = []string{""}
	}
	s := boundModelSet{names: names, index: make(map[string]int, len(names))}
	for k, m := range names {
		s.index[m] = k
	}
	return s
}

// boundItem is how many items of one size and one set of models arrived.
type boundItem struct {
	size   int64  // milli-GPU, 1-1000
	models uint32 // bit k: the cluster's k-th model admits it
	count  int64
}

func boundItems(w *Workload, pods []int, models boundModelSet) []boundItem {
	all := uint32(1)<<len(models.names) - 1
	type key struct {
		size   int64
		models uint32
	}
	counts := make(map[key]int64)
	for _, i := range pods {
		p := &w.Pods[i]
		if p.RequestedMilli() <= 0 {
			continue
		}
		set := admitted(p, models, all)
		if set == 0 {
			continue // no GPU of the cluster admits it
		}
		if p.GPUs == 1 && p.GPUMilli < gpuMilli {
			counts[key{p.GPUMilli, set}]++
		} else {
			counts[key{gpuMilli, set}] += int64(p.GPUs)
		}
	}
	out := make([]boundItem, 0, len(counts))
	for k, n := range counts {
		out = append(out, boundItem{size: k.size, models: k.models, count: n})
	}
	slices.SortFunc(out, func(a, b boundItem) int {
		return cmp.Or(cmp.Compare(a.size, b.size), cmp.Compare(a.models, b.models))
	})
	return out
}

// admitted is the set of the cluster's models pod p may use.
func admitted(p *trace.Pod, models boundModelSet, all uint32) uint32 {
	if len(p.Models) == 0 || len(models.names) == 1 && models.names[0] == "" {
		return all
	}
	var set uint32
	for _, m := range p.Models {
		if k, ok := models.index[strings.TrimSpace(m)]; ok {
			set |= 1 << k
		}
	}
	return set
}

// knapsackBound returns an upper bound on the milli-GPU the items can fill:
// the configuration linear program's, solved by column generation. A
// configuration is a set of items that fit one GPU of a model class; the
// program packs up to capacity[m] configurations of class m and up to
// count items of each kind. Its duals price each kind of item (v) and each
// class's GPUs: for any prices v >= 0, the most one GPU of class m holds
// with items valued at size minus price (a knapsack), times its GPUs, plus
// the items' prices, bounds the packing (Lagrangian duality). Each round
// prices the items with the program's duals, adds each class's best
// configuration at those prices, and keeps the least such bound: it is
// valid whatever the program's rounding, and meets the program's optimum
// when no configuration improves it.
func knapsackBound(items []boundItem, capacity []int64) float64 {
	nm, nt := len(capacity), len(items)
	var total float64
	b := make([]float64, nm+nt)
	for m, c := range capacity {
		total += float64(c * gpuMilli)
		b[m] = float64(c)
	}
	for t, it := range items {
		b[nm+t] = float64(it.count)
	}
	lp := newTableau(b)
	best := total
	v := make([]float64, nt)
	for range maxBoundRounds {
		bound := 0.0
		for t, it := range items {
			bound += float64(it.count) * v[t]
		}
		grew := false
		for m := range nm {
			value, count := bestConfiguration(items, m, v)
			bound += float64(capacity[m]) * value
			if value > lp.dual(m)+1e-7 {
				col := make([]float64, nm+nt)
				col[m] = 1
				full := 0.0
				for t, n := range count {
					col[nm+t] = n
					full += n * float64(items[t].size)
				}
				lp.addColumn(col, full)
				grew = true
			}
		}
		best = min(best, bound)
		if !grew || !lp.maximize() || best-lp.value < 1e-7*total {
			break
		}
		for t := range v {
			v[t] = max(0, lp.dual(nm+t))
		}
	}
	return best
}

// maxBoundRounds bounds the constraint generation; the bound stays valid
// when it stops early, only looser.
const maxBoundRounds = 400

// bestConfiguration returns the most one GPU of model m can hold with each
// item valued at its size minus its price (a knapsack of 1000 milli-GPU,
// any number of each kind), and how many of each kind it holds.
func bestConfiguration(items []boundItem, m int, price []float64) (float64, []float64) {
	best := make([]float64, gpuMilli+1)
	last := make([]int, gpuMilli+1) // the kind added last at each fill; -1 none
	for c := range last {
		last[c] = -1
	}
	for c := 1; c <= gpuMilli; c++ {
		best[c], last[c] = best[c-1], -2 // -2: one milli left empty
		for t, it := range items {
			if it.models&(1<<m) == 0 || it.size > int64(c) {
				continue
			}
			if val := best[c-int(it.size)] + float64(it.size) - price[t]; val > best[c]+1e-12 {
				best[c], last[c] = val, t
			}
		}
	}
	count := make([]float64, len(items))
	for c := gpuMilli; c > 0; {
		switch t := last[c]; t {
		case -2:
			c--
		case -1:
			c = 0
		default:
			count[t]++
			c -= int(items[t].size)
		}
	}
	return best[gpuMilli], count
}

// arrivedAt100 returns the pods of a seed's order up to the one with which
// arrivals reach 100% of capacity, as the replay counts them.
func arrivedAt100(w *Workload, order []int) []int {
	capacity := float64(w.Capacity())
	var arrived int64
	for k, i := range order {
		arrived += w.Pods[i].RequestedMilli()
		if float64(arrived) >= reportAtLow*capacity {
			return order[:k+1]
		}
	}
	return order
}

// tableau is a dense simplex tableau for max c·x subject to A·x <= b,
// x >= 0, with b >= 0, so its slacks start as the basis. Columns are added
// as they are generated; the slacks' columns hold the basis' inverse, and
// their reduced costs are the duals.
type tableau struct {
	rows  [][]float64 // B⁻¹[I | A]
	rhs   []float64
	cost  []float64 // reduced costs, c_B·B⁻¹·a - c per column
	basis []int
	value float64
}

func newTableau(b []float64) *tableau {
	n := len(b)
	t := &tableau{rows: make([][]float64, n), rhs: slices.Clone(b), cost: make([]float64, n), basis: make([]int, n)}
	for i := range n {
		t.rows[i] = make([]float64, n)
		t.rows[i][i] = 1
		t.basis[i] = i
	}
	return t
}

// dual returns constraint i's dual price.
func (t *tableau) dual(i int) float64 { return t.cost[i] }

// addColumn adds variable a with objective coefficient c.
func (t *tableau) addColumn(a []float64, c float64) {
	n := len(t.rhs)
	reduced := -c
	for k := range n {
		reduced += t.cost[k] * a[k]
	}
	for i := range n {
		var e float64
		for k := range n {
			e += t.rows[i][k] * a[k]
		}
		t.rows[i] = append(t.rows[i], e)
	}
	t.cost = append(t.cost, reduced)
}

// maximize pivots to the optimum: the most negative reduced cost enters,
// the least ratio leaves (the lowest basic variable on ties). It reports
// false if it gave up (too many pivots).
func (t *tableau) maximize() bool {
	const eps = 1e-9
	for range 100_000 {
		enter := -1
		for j, c := range t.cost {
			if c < -eps && (enter < 0 || c < t.cost[enter]) {
				enter = j
			}
		}
		if enter < 0 {
			return true
		}
		leave := -1
		var ratio float64
		for i, row := range t.rows {
			if a := row[enter]; a > eps {
				r := t.rhs[i] / a
				if leave < 0 || r < ratio-eps || r < ratio+eps && t.basis[i] < t.basis[leave] {
					leave, ratio = i, r
				}
			}
		}
		if leave < 0 {
			return false // unbounded: cannot happen with b's caps
		}
		t.pivot(leave, enter)
	}
	return false
}

func (t *tableau) pivot(r, j int) {
	p := t.rows[r]
	inv := 1 / p[j]
	for k := range p {
		p[k] *= inv
	}
	t.rhs[r] *= inv
	for i, row := range t.rows {
		if i == r || row[j] == 0 {
			continue
		}
		f := row[j]
		for k := range row {
			row[k] -= f * p[k]
		}
		t.rhs[i] -= f * t.rhs[r]
	}
	if f := t.cost[j]; f != 0 {
		for k := range t.cost {
			t.cost[k] -= f * p[k]
		}
		t.value -= f * t.rhs[r]
	}
	t.basis[r] = j
}
