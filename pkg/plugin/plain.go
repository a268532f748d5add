package plugin

import (
	"math"
	"sync"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpushare/gpushare/pkg/alloc"
)

const plainKey fwk.StateKey = Name + "/plain"

// plainCycle is the plugin's state for a pod that asks for no GPU under
// a fragmentation-aware policy. Such a pod's CPU and memory can strand a
// node's GPUs (a GPU is of no use where no CPU is left for its pods), so
// the policy ranks the nodes for it too, as the simulator does: without
// it, kube-scheduler's spreading of these pods leaves 6.70% of the openb
// default cluster's GPUs unallocated against 4.51% (gpushare-sim, seed
// 42). It never turns a node away: kube-scheduler's NodeResourcesFit
// judges CPU and memory.
type plainCycle struct {
	rater *alloc.Rater
	// req is the pod's request: its CPU counts in the learned workload
	// once it is bound (PostBind).
	req *alloc.PodRequest

	mu sync.Mutex
	// ratings of the gpushare nodes the pod fits; outside holds the
	// nodes without gpushare GPUs, which it strands none of.
	ratings map[string]alloc.Rating
	outside map[string]bool
}

// Clone implements fwk.StateData. The rater is read-only and shared.
func (c *plainCycle) Clone() fwk.StateData {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &plainCycle{rater: c.rater, req: c.req, ratings: make(map[string]alloc.Rating, len(c.ratings)), outside: make(map[string]bool, len(c.outside))}
	for k, v := range c.ratings {
		out.ratings[k] = v
	}
	for k, v := range c.outside {
		out.outside[k] = v
	}
	return out
}

// onGPUNode reports whether the pod was not found on a node without
// gpushare GPUs when it was filtered.
func (c *plainCycle) onGPUNode(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.outside[node]
}

// rating returns the node's rank key: nodes outside gpushare first, then
// the gpushare nodes by the policy, then those it found full (they fit
// only by kube-scheduler's count). Call with mu held.
func (c *plainCycle) rating(node string) alloc.Rating {
	if r, ok := c.ratings[node]; ok {
		return r
	}
	if c.outside[node] {
		return alloc.Rating{Score: alloc.Score{Primary: math.MaxInt64}}
	}
	return alloc.Rating{Score: alloc.Score{Primary: math.MinInt64}}
}

// preFilterPlain sets up the ranking of a pod without GPUs under a
// fragmentation-aware policy; other policies leave it to kube-scheduler.
func (pl *GPUShare) preFilterPlain(state fwk.CycleState, pod *corev1.Pod) (*fwk.PreFilterResult, *fwk.Status) {
	if !pl.policy.Weighs() {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	req, err := pl.model.PodRequest(pod)
	if err != nil || req.CPUMilli == 0 && req.MemoryMiB == 0 {
		// Nothing to strand GPUs with (decision.Request already
		// accepted the pod, so err is not expected).
		return nil, fwk.NewStatus(fwk.Skip)
	}
	state.Write(plainKey, &plainCycle{rater: pl.policy.Placer().NewRater(req, pl.seed), req: req,
		ratings: map[string]alloc.Rating{}, outside: map[string]bool{}})
	return nil, nil
}

// filterPlain rates the pod on a node; it passes every node.
func (pl *GPUShare) filterPlain(c *plainCycle, name string) {
	var (
		rating alloc.Rating
		unfit  *alloc.Unfit
	)
	err := pl.cache.Read(name, func(s *alloc.NodeState) { rating, unfit = c.rater.Rate(s) })
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.outside[name] = true
	case unfit == nil:
		c.ratings[name] = rating
	}
}

// readPlain returns the plain cycle PreFilter wrote, or nil.
func readPlain(state fwk.CycleState) *plainCycle {
	d, err := state.Read(plainKey)
	if err != nil {
		return nil
	}
	c, _ := d.(*plainCycle)
	return c
}
