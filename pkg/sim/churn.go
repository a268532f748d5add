package sim

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/workload"
)

// Lifetimes in a churn replay: the trace's, held between a minute and
// four hours. A pass lasts about the mean lifetime (the cluster holds
// about one pass of pods), so the longest lifetime sets how many passes
// the cluster needs to settle: at four hours, about seven. Uncapped, a
// few of the trace's pods live for months and hold their GPUs through
// every pass; 6% of the GPU demand is at the cap.
const (
	minLifetime = 60
	maxLifetime = 4 * 3600
)

// Passes of a churn replay by default, and those not measured.
const (
	churnPasses = 12
	churnWarmup = 4
)

// ChurnOptions tune a Churn replay.
type ChurnOptions struct {
	// Load is the offered GPU load in fractions of the cluster's GPUs:
	// the GPUs the arriving pods would hold on average if all ran. 0
	// means 1.
	Load float64
	// Passes is how many times the trace's pods arrive; the first
	// churnWarmup passes fill the cluster and are not measured. 0 means
	// churnPasses.
	Passes int
	// Workload, Learn and Defrag as in Options.
	Workload string
	Learn    workload.Config
	Defrag   *Defrag
	// Parallel is how many seeds replay at once; 0 means GOMAXPROCS.
	Parallel int
}

// ChurnResult is one policy replayed with churn, averaged over seeds.
type ChurnResult struct {
	Workload string   `json:"workload"`
	Policy   string   `json:"policy"`
	Defrag   bool     `json:"defrag"`
	Seeds    []uint64 `json:"seeds"`
	Load     float64  `json:"offered_load"`
	// Allocated is the share of the cluster's GPUs allocated, averaged
	// over the measured time (the passes after churnWarmup).
	Allocated        float64   `json:"allocated_gpu_pct_time_avg"`
	AllocatedPerSeed []float64 `json:"allocated_gpu_pct_time_avg_per_seed"`
	// Of the GPU pods that arrived in the measured time: the % that
	// found no room at once and waited, the % that gave up waiting (they
	// waited as long as they would have run), and the GPU demand (%)
	// of those that gave up.
	Waited         float64 `json:"gpu_pods_waited_pct"`
	TurnedAway     float64 `json:"gpu_pods_turned_away_pct"`
	TurnedAwayGPUs float64 `json:"gpu_demand_turned_away_pct"`
	// The wait of GPU pods that waited and were placed, in seconds of
	// the trace's time.
	WaitP50s float64 `json:"wait_s_p50"`
	WaitP99s float64 `json:"wait_s_p99"`
	// With Defrag: pods moved per 20 GPU pods placed.
	MovedPer20 float64 `json:"pods_moved_per_20_placed,omitempty"`
	Pods       int     `json:"arrivals_per_seed"`
}

// Churn replays w's pods as they come and go: each pass over the pods in
// the order the trace created them (then by name), evenly spaced so that
// their trace lifetimes offer Load of the cluster's GPUs, each leaving
// when its lifetime ends. A pod that fits nowhere waits, and is tried
// again on each node a pod leaves (the only place new room appears),
// oldest first; with Defrag, pods are first moved to make room for it. It
// gives up once it has waited its own lifetime. It reports what the
// cluster held over time, and who waited.
func Churn(ctx context.Context, w *Workload, policy string, seeds []uint64, o ChurnOptions) (*ChurnResult, error) {
	if o.Load == 0 {
		o.Load = 1
	}
	if o.Passes == 0 {
		o.Passes = churnPasses
	}
	if o.Load < 0 || o.Passes <= churnWarmup {
		return nil, fmt.Errorf("churn needs a positive load and more than %d passes", churnWarmup)
	}
	order, gap, err := churnOrder(w, o.Load)
	if err != nil {
		return nil, err
	}
	cfg, _, nodes, err := placerConfig(w, policy, o.Workload)
	if err != nil {
		return nil, err
	}
	runs := make([]churnRun, len(seeds))
	errs := make([]error, len(seeds))
	parallel := o.Parallel
	if parallel <= 0 {
		parallel = 2
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, seed := range seeds {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c := cfg
			c.Seed = seed
			p, err := workload.NewPolicy(c, o.Learn)
			if err == nil {
				runs[i], err = churn(ctx, w, nodes, p, order, gap, o, seed)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r := &ChurnResult{Workload: w.Name, Policy: policy, Defrag: o.Defrag != nil, Seeds: seeds, Load: o.Load}
	var waits []float64
	var waited, away, arrived, placed, moved int
	var awayMilli, arrivedMilli int64
	for _, s := range runs {
		r.Allocated += s.allocated
		r.AllocatedPerSeed = append(r.AllocatedPerSeed, s.allocated)
		waits = append(waits, s.waits...)
		waited, away, arrived = waited+s.waited, away+s.away, arrived+s.arrived
		awayMilli, arrivedMilli = awayMilli+s.awayMilli, arrivedMilli+s.arrivedMilli
		placed, moved = placed+s.placed, moved+s.moved
		r.Pods += s.pods
	}
	r.Allocated /= float64(max(len(runs), 1))
	r.Pods /= max(len(runs), 1)
	if arrived > 0 {
		r.Waited = 100 * float64(waited) / float64(arrived)
		r.TurnedAway = 100 * float64(away) / float64(arrived)
	}
	if arrivedMilli > 0 {
		r.TurnedAwayGPUs = 100 * float64(awayMilli) / float64(arrivedMilli)
	}
	if placed > 0 && o.Defrag != nil {
		r.MovedPer20 = 20 * float64(moved) / float64(placed)
	}
	slices.Sort(waits)
	r.WaitP50s, r.WaitP99s = quantileOf(waits, 0.5), quantileOf(waits, 0.99)
	return r, nil
}

// churnOrder returns the pods in the trace's creation order and the
// arrival gap, in seconds, at which their lifetimes offer load.
func churnOrder(w *Workload, load float64) ([]int, float64, error) {
	order := make([]int, len(w.Pods))
	var held float64 // Σ GPU milli x lifetime
	for i := range w.Pods {
		p := &w.Pods[i]
		if !p.HasTimes {
			return nil, 0, fmt.Errorf("pod %s has no creation and deletion times: a churn replay needs them", p.Name)
		}
		order[i] = i
		held += float64(p.RequestedMilli()) * float64(lifetime(p.Lifetime()))
	}
	if held == 0 {
		return nil, 0, errors.New("no pod asks for a GPU")
	}
	slices.SortStableFunc(order, func(a, b int) int {
		pa, pb := &w.Pods[a], &w.Pods[b]
		return cmp.Or(cmp.Compare(pa.Created, pb.Created), cmp.Compare(pa.Name, pb.Name))
	})
	gap := held / (float64(len(order)) * load * float64(w.Capacity()))
	return order, gap, nil
}

func lifetime(seconds int64) float64 {
	return float64(min(max(seconds, minLifetime), maxLifetime))
}

// churnRun is what one seed's churn replay measured.
type churnRun struct {
	allocated                   float64
	waits                       []float64
	waited, away, arrived, pods int
	awayMilli, arrivedMilli     int64
	placed, moved               int
}

// running is a placed pod.
type running struct {
	key   string
	node  int
	place *alloc.Placement
	milli int64
	ends  float64
}

// waiting is a pod that found no room.
type waiting struct {
	key      string
	req      alloc.PodRequest
	milli    int64
	since    float64
	deadline float64
	lifetime float64
	measured bool
}

// departures is a min-heap of running pods by end time.
type departures []*running

func (h departures) Len() int           { return len(h) }
func (h departures) Less(i, j int) bool { return h[i].ends < h[j].ends }
func (h departures) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *departures) Push(x any)        { *h = append(*h, x.(*running)) }
func (h *departures) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func churn(ctx context.Context, w *Workload, nodes []*alloc.Node, policy *workload.Policy, order []int, gap float64, o ChurnOptions, seed uint64) (churnRun, error) {
	states := make([]*alloc.NodeState, len(nodes))
	for i, n := range nodes {
		states[i] = alloc.NewNodeState(n)
	}
	var queued int64 // milli-GPU of the pods in queue
	var turnover alloc.Churn
	policy.Follow(Room{Left: states, Waiting: &queued, Churn: &turnover})
	var mv *mover
	if o.Defrag != nil {
		mv = newMover(o.Defrag, seed)
	}
	capacity := float64(w.Capacity())
	measureFrom := float64(churnWarmup*len(order)) * gap
	var run churnRun
	var out departures
	var queue []*waiting
	var allocated int64 // milli-GPU held now
	var now, integral float64
	advance := func(t float64) {
		if t > measureFrom {
			integral += float64(allocated) * (t - max(now, measureFrom))
		}
		now = t
	}
	start := func(key string, req *alloc.PodRequest, d alloc.Decision, milli int64, life float64, since float64, measured bool) error {
		if err := states[d.Index].Apply(d.Placement); err != nil {
			return fmt.Errorf("pod %s: %w", key, err)
		}
		allocated += milli
		turnover.Place(milli)
		heap.Push(&out, &running{key: key, node: d.Index, place: d.Placement, milli: milli, ends: now + life})
		if mv != nil {
			mv.placed(key, *req, d)
		}
		if measured && milli > 0 {
			run.placed++
			if now > since {
				run.waits = append(run.waits, now-since)
			}
		}
		return nil
	}
	leave := func(r *running) error {
		place, node := r.place, r.node
		if m := mv.pod(r.key); m != nil {
			place, node = m.placement, m.node // it was moved
			mv.gone(r.key)
		}
		if err := states[node].Release(place); err != nil {
			return fmt.Errorf("pod %s leaving: %w", r.key, err)
		}
		allocated -= r.milli
		turnover.Release(r.milli)
		// New room is on this node alone: the oldest waiting pods that
		// fit there start, and those past their patience give up.
		kept := queue[:0]
		for _, q := range queue {
			if now >= q.deadline {
				queued -= q.milli
				if q.measured && q.milli > 0 {
					run.away++
					run.awayMilli += q.milli
				}
				continue
			}
			if p, _ := policy.Placer().Place(states[node], &q.req); p != nil {
				queued -= q.milli
				if err := start(q.key, &q.req, alloc.Decision{Index: node, Placement: p}, q.milli, q.lifetime, q.since, q.measured); err != nil {
					return err
				}
				continue
			}
			kept = append(kept, q)
		}
		queue = kept
		return nil
	}
	for pass := range o.Passes {
		for k, i := range order {
			if k%256 == 0 && ctx.Err() != nil {
				return run, ctx.Err()
			}
			t := float64(pass*len(order)+k) * gap
			for len(out) > 0 && out[0].ends <= t {
				r := heap.Pop(&out).(*running)
				advance(r.ends)
				if err := leave(r); err != nil {
					return run, err
				}
			}
			advance(t)
			p := &w.Pods[i]
			key := strconv.Itoa(pass*len(order) + k)
			req := Request(p)
			milli := p.RequestedMilli()
			life := lifetime(p.Lifetime())
			measured := t >= measureFrom
			run.pods++
			if measured && milli > 0 {
				run.arrived++
				run.arrivedMilli += milli
			}
			policy.Observe(key, &req)
			d := policy.Placer().Pick(states, &req, seed)
			if d.Placement == nil && mv != nil && req.GPUs() {
				moved, err := mv.makeRoom(policy.Placer(), states, &req, seed, &d)
				if err != nil {
					return run, fmt.Errorf("pod %s: %w", key, err)
				}
				if measured {
					run.moved += moved
				}
			}
			if d.Placement != nil {
				if err := start(key, &req, d, milli, life, t, measured); err != nil {
					return run, err
				}
				continue
			}
			if measured && milli > 0 {
				run.waited++
			}
			queued += milli
			queue = append(queue, &waiting{key: key, req: req, milli: milli, since: t, deadline: t + life, lifetime: life, measured: measured})
		}
	}
	advance(float64(o.Passes*len(order)) * gap)
	if span := now - measureFrom; span > 0 {
		run.allocated = 100 * integral / span / capacity
	}
	return run, nil
}

// quantileOf returns the q-quantile of sorted values.
func quantileOf(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}
