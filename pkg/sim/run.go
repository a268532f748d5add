package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/trace"
	"github.com/gpushare/gpushare/pkg/workload"
)

// Arrival limits of the protocol, in fractions of the cluster's GPUs.
const (
	arrivalEnd  = 1.3
	shapeCover  = 0.95
	curveSteps  = 130 // curve points: one per 1% of capacity
	fragAt      = 0.9
	reportAtLow = 1.0
)

// Point is allocated GPU against arrived GPU, both in % of capacity.
type Point struct {
	Arrived   float64 `json:"arrived_pct"`
	Allocated float64 `json:"allocated_pct"`
}

// Result is one policy on one workload, over several seeds.
type Result struct {
	Workload string `json:"workload"`
	Policy   string `json:"policy"`
	// Claims: the pods were placed as ResourceClaims (Options.Claims).
	Claims        bool     `json:"claims,omitempty"`
	Seeds         []uint64 `json:"seeds"`
	Unalloc100    float64  `json:"unallocated_gpu_pct_at_100"`
	Unalloc130    float64  `json:"unallocated_gpu_pct_at_130"`
	Frag90        float64  `json:"fragmentation_pct_at_90"`
	DecisionP50us float64  `json:"decision_us_p50"`
	DecisionP99us float64  `json:"decision_us_p99"`
	// PerSeed holds the unallocated % at 100% arrived for each seed.
	PerSeed []float64 `json:"unallocated_gpu_pct_at_100_per_seed"`
	// Bound100 is the mean over seeds of a lower bound on the unallocated
	// % at 100% arrived that no placement of the same pods, online or
	// offline, can beat (Bound); BoundPerSeed per seed.
	Bound100     float64   `json:"unallocated_gpu_pct_bound_at_100"`
	BoundPerSeed []float64 `json:"unallocated_gpu_pct_bound_at_100_per_seed"`
	// With Options.Defrag: pods moved per pod placed, up to 100% arrived,
	// the plans made then, and the p99 time to find a plan (or none).
	MovedPerPlaced100 float64 `json:"pods_moved_per_placed_at_100,omitempty"`
	Plans100          int     `json:"plans_at_100,omitempty"`
	PlanP99ms         float64 `json:"plan_ms_p99,omitempty"`
	Pods              int     `json:"pods_per_seed_mean"`
	Curve             []Point `json:"curve"`
}

// placerConfig returns policy's placer configuration for w's nodes and
// workload source (Oracle: the trace's own mix; Online: none, to learn),
// the trace's mix, and the nodes; it refuses an unknown policy or source.
func placerConfig(w *Workload, policy, source string) (alloc.Config, []alloc.Shape, []*alloc.Node, error) {
	cfg := parsePolicy(policy)
	oracle := Shapes(w.Pods, shapeCover)
	cfg.Workload = oracle
	if _, err := alloc.NewPlacer(cfg); err != nil {
		return cfg, nil, nil, err
	}
	switch source {
	case "", Oracle:
	case Online:
		cfg.Workload = nil
	default:
		return cfg, nil, nil, fmt.Errorf("unknown workload source %q (want %s or %s)", source, Oracle, Online)
	}
	nodes, err := w.nodes()
	if err != nil {
		return cfg, nil, nil, err
	}
	cfg.Supply = alloc.SupplyOf(nodes)
	return cfg, oracle, nodes, nil
}

// Policy names a node-level and a GPU-level policy: "NAME" for both or
// "NODE/GPU".
func parsePolicy(name string) alloc.Config {
	node, gpu, _ := strings.Cut(name, "/")
	return alloc.Config{Node: node, GPU: gpu}
}

// Where a fragmentation-aware policy gets the workload it weighs.
const (
	// Oracle gives the policy the trace's own shapes (FGD's protocol).
	Oracle = "oracle"
	// Online learns the shapes from the pods as they arrive, as the
	// scheduler does (pkg/workload, its defaults): each pod is observed
	// just before it is placed.
	Online = "online"
)

// Options tune a Run.
type Options struct {
	// Workload is Oracle (default) or Online.
	Workload string
	// Learn tunes the online learner; zero fields take its defaults.
	Learn workload.Config
	// Parallel is how many seeds replay at once; 0 means GOMAXPROCS.
	// Decision times are cleanest with 1: replays then do not share cores.
	Parallel int
	// Progress, if not nil, is called after each seed.
	Progress func(done, total int)
	// Defrag, if set, moves movable pods to make room for a pod that
	// fits nowhere (alloc.Placer.PlanDefrag).
	Defrag *Defrag
	// Claims places each pod as gpushare-scheduler places a
	// ResourceClaim of gpushare's devices: the node by the policy, each
	// rated with the GPUs Kubernetes' DRA allocator gives the claim there,
	// the first that fit (alloc.Placer.FirstFit). Claims are not moved:
	// it excludes Defrag.
	Claims bool
}

// Defrag configures defragmentation in a replay.
type Defrag struct {
	// Movable is the share of GPU pods that may move, drawn per pod from
	// the seed.
	Movable float64
	// Budget bounds each plan.
	Budget alloc.DefragBudget
}

// Run replays w under the policy for each seed, in parallel, and averages.
func Run(ctx context.Context, w *Workload, policy string, seeds []uint64, o Options) (*Result, error) {
	if o.Claims && o.Defrag != nil {
		return nil, errors.New("claims are not moved: a replay of claims cannot defragment")
	}
	cfg, oracle, nodes, err := placerConfig(w, policy, o.Workload)
	if err != nil {
		return nil, err
	}
	runs := make([]seedRun, len(seeds))
	errs := make([]error, len(seeds))
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	parallel := o.Parallel
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	sem := make(chan struct{}, parallel)
	for i, seed := range seeds {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c := cfg
			c.Seed = seed
			var p *workload.Policy
			if p, errs[i] = workload.NewPolicy(c, o.Learn); errs[i] == nil {
				runs[i], errs[i] = replay(ctx, w, nodes, p, oracle, seed, o.Defrag, o.Claims)
			}
			if errs[i] == nil {
				runs[i].bound100 = Bound(w, arrivedAt100(w, Order(w, seed)))
			}
			mu.Lock()
			done++
			if o.Progress != nil {
				o.Progress(done, len(seeds))
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	r := summarize(w.Name, policy, seeds, runs)
	r.Claims = o.Claims
	return r, nil
}

// seedRun is what one replay measured.
type seedRun struct {
	unalloc100, unalloc130, frag90 float64
	bound100                       float64
	decisions                      []time.Duration
	curve                          []Point
	pods                           int
	// moved and placed count pods up to 100% arrived; plans and
	// planTimes the defragmentation plans tried.
	moved, placed, plans int
	planTimes            []time.Duration
}

// Order returns the arrival order for a seed: pods sorted by name,
// shuffled, then random draws from the trace until the requested GPU
// reaches 130% of capacity.
func Order(w *Workload, seed uint64) []int {
	idx := make([]int, len(w.Pods))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return w.Pods[idx[a]].Name < w.Pods[idx[b]].Name })
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	r.Shuffle(len(idx), func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
	var total int64
	for _, i := range idx {
		total += w.Pods[i].RequestedMilli()
	}
	limit := int64(arrivalEnd * float64(w.Capacity()))
	if !slices.ContainsFunc(w.Pods, func(p trace.Pod) bool { return p.RequestedMilli() > 0 }) {
		return idx
	}
	for total < limit {
		i := r.IntN(len(w.Pods))
		idx = append(idx, i)
		total += w.Pods[i].RequestedMilli()
	}
	return idx
}

// replay places the pods of one seed's order; shapes measure
// fragmentation. A learning policy observes each pod before placing it.
func replay(ctx context.Context, w *Workload, nodes []*alloc.Node, policy *workload.Policy, shapes []alloc.Shape, seed uint64, defrag *Defrag, claims bool) (seedRun, error) {
	states := make([]*alloc.NodeState, len(nodes))
	for i, n := range nodes {
		states[i] = alloc.NewNodeState(n)
	}
	var waiting int64 // milli-GPU turned away
	policy.Follow(Room{Left: states, Waiting: &waiting})
	var mover *mover
	if defrag != nil {
		mover = newMover(defrag, seed)
	}
	capacity := float64(w.Capacity())
	var run seedRun
	var arrived, allocated int64
	seen100, seen130, seen90 := false, false, false
	next := 1
	for k, i := range Order(w, seed) {
		if k%256 == 0 && ctx.Err() != nil {
			return run, ctx.Err()
		}
		p := &w.Pods[i]
		req := Request(p)
		t0 := time.Now()
		policy.Observe(strconv.Itoa(k), &req)
		pl := policy.Placer()
		if claims {
			pl = pl.FirstFit()
		}
		d := pl.Pick(states, &req, seed)
		run.decisions = append(run.decisions, time.Since(t0))
		if d.Placement == nil && mover != nil && req.GPUs() {
			t0 := time.Now()
			moved, err := mover.makeRoom(policy.Placer(), states, &req, seed, &d)
			run.planTimes = append(run.planTimes, time.Since(t0))
			if err != nil {
				return run, fmt.Errorf("pod %s: %w", p.Name, err)
			}
			if moved > 0 && !seen100 {
				run.moved += moved
				run.plans++
			}
		}
		if d.Placement != nil {
			if err := states[d.Index].Apply(d.Placement); err != nil {
				return run, fmt.Errorf("pod %s: %w", p.Name, err)
			}
			allocated += p.RequestedMilli()
			if !seen100 {
				run.placed++
			}
			if mover != nil {
				mover.placed(strconv.Itoa(k), req, d)
			}
		}
		if d.Placement == nil {
			waiting += p.RequestedMilli()
		}
		arrived += p.RequestedMilli()
		run.pods++
		for next <= curveSteps && float64(arrived) >= float64(next)/100*capacity {
			run.curve = append(run.curve, Point{Arrived: 100 * float64(arrived) / capacity, Allocated: 100 * float64(allocated) / capacity})
			next++
		}
		unalloc := 100 * (capacity - float64(allocated)) / capacity
		if !seen90 && float64(arrived) >= fragAt*capacity {
			seen90 = true
			run.frag90 = fragmentationPct(states, shapes, capacity)
		}
		if !seen100 && float64(arrived) >= reportAtLow*capacity {
			seen100, run.unalloc100 = true, unalloc
		}
		if !seen130 && float64(arrived) >= arrivalEnd*capacity {
			seen130, run.unalloc130 = true, unalloc
		}
	}
	if !seen130 {
		run.unalloc130 = 100 * (capacity - float64(allocated)) / capacity
	}
	return run, nil
}

// fragmentationPct is the expected GPU share an arriving pod of the
// workload could not use, summed over nodes, in % of capacity.
func fragmentationPct(states []*alloc.NodeState, shapes []alloc.Shape, capacity float64) float64 {
	var weight, frag int64
	for _, q := range shapes {
		weight += q.Weight
	}
	for _, s := range states {
		frag += alloc.Fragmentation(s, shapes)
	}
	if weight == 0 {
		return 0
	}
	return 100 * float64(frag) / float64(weight) / capacity
}

func summarize(workload, policy string, seeds []uint64, runs []seedRun) *Result {
	r := &Result{Workload: workload, Policy: policy, Seeds: seeds}
	var all []time.Duration
	points := make([][]Point, curveSteps)
	for _, s := range runs {
		r.Unalloc100 += s.unalloc100
		r.Unalloc130 += s.unalloc130
		r.Frag90 += s.frag90
		r.Pods += s.pods
		r.PerSeed = append(r.PerSeed, s.unalloc100)
		r.Bound100 += s.bound100
		r.BoundPerSeed = append(r.BoundPerSeed, s.bound100)
		all = append(all, s.decisions...)
		for i, p := range s.curve {
			points[i] = append(points[i], p)
		}
	}
	n := float64(max(len(runs), 1))
	r.Unalloc100 /= n
	r.Bound100 /= n
	r.Unalloc130 /= n
	r.Frag90 /= n
	var moved, placed int
	var plans []time.Duration
	for _, s := range runs {
		moved, placed, r.Plans100 = moved+s.moved, placed+s.placed, r.Plans100+s.plans
		plans = append(plans, s.planTimes...)
	}
	if placed > 0 {
		r.MovedPerPlaced100 = float64(moved) / float64(placed)
	}
	slices.SortFunc(plans, cmp.Compare)
	r.PlanP99ms = quantile(plans, 0.99) / 1000
	r.Pods /= max(len(runs), 1)
	slices.SortFunc(all, cmp.Compare)
	r.DecisionP50us = quantile(all, 0.50)
	r.DecisionP99us = quantile(all, 0.99)
	for _, ps := range points {
		if len(ps) == 0 {
			continue
		}
		var sum Point
		for _, v := range ps {
			sum.Arrived += v.Arrived
			sum.Allocated += v.Allocated
		}
		n := float64(len(ps))
		r.Curve = append(r.Curve, Point{Arrived: sum.Arrived / n, Allocated: sum.Allocated / n})
	}
	return r
}

// quantile returns the q-quantile of sorted durations in microseconds.
func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Microsecond)
}

// Left is the supply that the states' bookings leave free, for a policy
// to follow (workload.Policy.Follow) as the scheduler's follows its
// cache. The nodes of a replay never change, so neither does the
// generation: the policy reads the free share again every
// workload.SupplyRefresh pods it observes while it weighs model-bound
// demand. The simulator observes every arriving pod, the scheduler the
// pods it binds, so near a full cluster the simulator reads more often.
type Left []*alloc.NodeState

// Supply is alloc.SupplyLeft of the states, at generation 1.
func (l Left) Supply() ([]alloc.Supply, uint64) { return alloc.SupplyLeft(l), 1 }

// SupplyGeneration is 1: the nodes never change.
func (l Left) SupplyGeneration() uint64 { return 1 }

// Room is Left with the GPU demand waiting, for a policy that keeps idle
// GPUs spare for whole-GPU pods (workload.Config.Spare): a replay's pods
// turned away, or churn's pods in the queue.
type Room struct {
	Left
	// Waiting is the GPU demand waiting, in thousandths of a GPU.
	Waiting *int64
	// Churn, if set, follows the GPU demand released against the demand
	// placed (churn); nil is a cluster that only fills.
	Churn *alloc.Churn
}

// Room is alloc.Spare.Add over the states, and the demand waiting in GPUs.
func (r Room) Room(sp *alloc.Spare) (alloc.Room, float64) {
	var out alloc.Room
	for _, s := range r.Left {
		sp.Add(&out, s)
	}
	if r.Churn != nil {
		out.Turnover = r.Churn.Turnover()
	}
	return out, float64(*r.Waiting) / 1000
}
