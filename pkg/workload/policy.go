package workload

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// DefaultRefresh is how many pods a Placer serves at most before Policy
// builds one for the mix learned since. A new Placer keeps the nodes'
// derived data while the mix's GPU demands stay the same
// (alloc.Placer.Reweigh); when they change it derives them again, once
// per node, so this also bounds that cost to one decision in
// DefaultRefresh.
const DefaultRefresh = 128

// SupplyRefresh is how many pods Policy observes before it reads its
// source's supply again, to weigh what is left free of each GPU model
// (alloc.Supply.Free), while its Placer weighs some demand bound to
// models (alloc.Placer.Pressed); the read comes with the next Placer
// call. Between reads a Placer weighs the free share it was built with.
const SupplyRefresh = 64

// Policy is a placement policy fed by a Learner: Placer returns a Placer
// for the workload learned so far. Policies that weigh no workload
// (binpack, spread, ...) get one fixed Placer and learn nothing.
type Policy struct {
	cfg     alloc.Config
	learner *Learner
	weighs  bool
	// spare says the policy keeps idle GPUs spare for whole-GPU pods
	// (Config.Spare), which it can only with a RoomSource; keepFor is
	// Config.KeepFor, defaulted.
	spare   bool
	keepFor time.Duration

	mu     sync.Mutex
	placer atomic.Pointer[alloc.Placer]
	// built is the learner's count of pods when placer was built.
	built atomic.Int64
	// src is where the supply comes from (Follow), gen the generation
	// of the supply placer weighs.
	src SupplySource
	gen atomic.Uint64
	// observed counts the pods observed, read the count when the
	// supply was last read.
	observed, read atomic.Int64

	// overrides are the Placers of the policies pods pick for
	// themselves (PlacerFor), built from overridden.
	overrides  map[[2]string]*alloc.Placer
	overridden *alloc.Placer
}

// NewPolicy checks cfg's policy names and returns a Policy. A
// fragmentation-aware policy learns with lc, unless cfg.Workload is set:
// a workload known in advance is weighed as it is.
func NewPolicy(cfg alloc.Config, lc Config) (*Policy, error) {
	p := &Policy{cfg: cfg, weighs: alloc.NeedsWorkload(cfg)}
	if !p.weighs || len(cfg.Workload) > 0 {
		pl, err := alloc.NewPlacer(cfg)
		if err != nil {
			return nil, err
		}
		p.placer.Store(pl)
		return p, nil
	}
	p.learner = NewLearner(lc)
	p.spare, p.keepFor = lc.Spare, lc.KeepFor
	if p.keepFor <= 0 {
		p.keepFor = DefaultKeepFor
	}
	if err := p.rebuild(); err != nil {
		return nil, err
	}
	return p, nil
}

// Weighs reports whether the policy weighs a workload (a
// fragmentation-aware one): it then also has a say where pods without
// GPUs go, since their CPU and memory can strand a node's GPUs.
func (p *Policy) Weighs() bool { return p.weighs }

// Learns reports whether the policy learns a workload.
func (p *Policy) Learns() bool { return p.learner != nil }

// KeepsIdle reports whether the policy keeps idle GPUs spare for
// whole-GPU pods (Config.Spare) once it follows a RoomSource.
func (p *Policy) KeepsIdle() bool { return p.spare && p.learner != nil }

// KeepFor is how long a pod waits, from its creation, while idle GPUs are
// kept from it (Config.KeepFor): the expected whole-GPU pods may never
// come, and on a quiet cluster nothing else would end the keeping.
func (p *Policy) KeepFor() time.Duration { return p.keepFor }

// Learner returns the policy's learner, nil if it learns nothing.
func (p *Policy) Learner() *Learner { return p.learner }

// Observe counts the pod in the learned mix, once per key (the pod's
// UID); a pod without GPUs counts for its CPU alone (Learner.ObserveCPU),
// unless it asks neither CPU nor memory (nothing to strand GPUs with: the
// plugin does not rate it).
func (p *Policy) Observe(key string, req *alloc.PodRequest) {
	if p.src != nil {
		p.observed.Add(1)
	}
	if p.learner == nil {
		return
	}
	if q, ok := ShapeOf(req); ok {
		p.learner.Observe(key, q)
	} else if req.CPUMilli > 0 || req.MemoryMiB > 0 {
		p.learner.ObserveCPU(key, req.CPUMilli)
	}
}

// Placer returns the Placer for the mix learned so far and the supply
// followed. It is rebuilt when the pods observed since it was built reach
// the pods observed before it (1, 2, 4, ... while warming up), and at
// most every DefaultRefresh pods after.
func (p *Policy) Placer() *alloc.Placer {
	if p.learner != nil {
		n, built := p.learner.Observed(), p.built.Load()
		if n-built >= min(max(built, 1), DefaultRefresh) {
			p.mu.Lock()
			if n-p.built.Load() >= min(max(p.built.Load(), 1), DefaultRefresh) {
				// The names were checked in NewPolicy and the learner's
				// shapes are never empty: rebuild cannot fail here.
				_ = p.rebuild()
			}
			p.mu.Unlock()
		}
	}
	// After the rebuild: keeping idle GPUs spare weighs its mix.
	p.follow()
	return p.placer.Load()
}

// PlacerFor returns Placer with the node policy, the GPU policy or both
// replaced as a pod asks ("" keeps the policy's; see alloc.Placer.Override),
// or why it cannot be.
func (p *Policy) PlacerFor(node, gpu string) (*alloc.Placer, error) {
	base := p.Placer()
	if node == "" && gpu == "" {
		return base, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.overridden != base {
		p.overrides, p.overridden = map[[2]string]*alloc.Placer{}, base
	}
	key := [2]string{node, gpu}
	if pl := p.overrides[key]; pl != nil {
		return pl, nil
	}
	pl, err := base.Override(node, gpu)
	if err != nil {
		return nil, err
	}
	p.overrides[key] = pl
	return pl, nil
}

// SupplySource tells a Policy the cluster's GPUs per kind, sorted by
// alloc.CompareSupply, with what is free of them, and a generation that
// changes when the GPUs do (the scheduler's cache). Bookings need not
// move the generation: the Policy reads the free share again every
// SupplyRefresh pods while it weighs model-bound demand.
type SupplySource interface {
	Supply() ([]alloc.Supply, uint64)
	SupplyGeneration() uint64
}

// RoomSource is a SupplySource that also tells the room its nodes leave
// for keeping idle GPUs spare (alloc.Spare.Add over every node, and the
// turnover) and the GPU demand waiting: pods turned away or pending, in
// GPUs.
type RoomSource interface {
	SupplySource
	Room(sp *alloc.Spare) (room alloc.Room, waiting float64)
}

// Follow has the policy weigh the workload against src's supply: Placer
// reads it when the generation moved, and every SupplyRefresh pods
// observed while the Placer is Pressed, and rebuilds the Placer when the
// supply changed. A policy that keeps idle GPUs spare (Config.Spare) and
// whose src is a RoomSource also reads the room every SupplyRefresh pods,
// and keeps them while it is short (alloc.Spare.Keeps). Policies that
// weigh no workload ignore it. Call it before Placer and Observe.
func (p *Policy) Follow(src SupplySource) {
	if p.weighs {
		p.src = src
	}
}

// current reports whether the Placer weighs src's supply as it is.
func (p *Policy) current() bool {
	if p.src.SupplyGeneration() != p.gen.Load() {
		return false
	}
	return p.observed.Load()-p.read.Load() < SupplyRefresh || !p.placer.Load().Pressed() && !p.spares()
}

// spares reports whether the policy weighs keeping idle GPUs spare:
// Config.Spare, a learned mix and a RoomSource.
func (p *Policy) spares() bool {
	_, ok := p.src.(RoomSource)
	return ok && p.KeepsIdle()
}

// Reread has the next Placer call read the supply and the room again, as
// if SupplyRefresh pods had been observed since the last read: for a pod
// turned away while idle GPUs were kept spare, whose demand, now
// waiting, may end the keeping before as many pods are placed (the
// scheduler observes only the pods it places).
func (p *Policy) Reread() {
	if p.src != nil {
		p.read.Store(p.observed.Load() - SupplyRefresh)
	}
}

// setSupplyLocked has the Placer weigh supply, a new one if it changed.
func (p *Policy) setSupplyLocked(supply []alloc.Supply) {
	old := p.placer.Load()
	if slices.Equal(old.Supply(), supply) {
		return
	}
	// The names were checked in NewPolicy: Resupply cannot fail here.
	if pl, err := old.Resupply(slices.Clone(supply)); err == nil {
		p.placer.Store(pl)
	}
}

// follow brings the Placer up to date with src's supply: when its GPUs
// changed, or SupplyRefresh pods were observed since it was last read and
// the Placer weighs the free share (some demand is bound to models).
func (p *Policy) follow() {
	if p.src == nil || p.current() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current() {
		return // another caller read it
	}
	n := p.observed.Load()
	supply, gen := p.src.Supply()
	p.setSupplyLocked(supply)
	if p.spares() {
		p.setSpareLocked(supply)
	}
	p.gen.Store(gen)
	p.read.Store(n)
}

// setSpareLocked has the Placer keep idle GPUs spare if the room is short
// for the whole-GPU demand of the mix learned so far, and keep none if
// not. Until the learner has seen as many pods as its prior weighs, the
// mix is mostly the prior's guess, and none are kept: a scheduler that
// restarts beside a busy cluster does not turn shares away on a guess.
func (p *Policy) setSpareLocked(supply []alloc.Supply) {
	old := p.placer.Load()
	if p.learner.Observed() < p.learner.cfg.Warmup {
		if old.Spare() != nil {
			p.placer.Store(old.Sparing(nil))
		}
		return
	}
	var gpus, mib int64
	for _, s := range supply {
		gpus += s.GPUs
		mib += s.GPUs * s.MemoryMiB
	}
	// The pods observed, not the prior: its guess of whole GPUs would
	// keep idle GPUs from a cluster of shares for thousands of pods.
	sp := alloc.SpareOf(p.learner.ObservedMix(), mib/max(gpus, 1))
	// A mix without whole-GPU pods keeps nothing: the room, a walk over
	// every node, is not read for it.
	if sp.Whole > 0 {
		if room, waiting := p.src.(RoomSource).Room(&sp); sp.Keeps(room, waiting) {
			p.placer.Store(old.Sparing(&sp))
			return
		}
	}
	if old.Spare() != nil {
		p.placer.Store(old.Sparing(nil))
	}
}

// rebuild builds a Placer for the learner's current shapes.
func (p *Policy) rebuild() error {
	n := p.learner.Observed()
	var (
		pl  *alloc.Placer
		err error
	)
	shapes, mix := p.learner.Shapes(), p.learner.Mix()
	if old := p.placer.Load(); old != nil {
		pl, err = old.Reweigh(shapes, mix)
	} else {
		c := p.cfg
		c.Workload, c.Mix = shapes, mix
		pl, err = alloc.NewPlacer(c)
	}
	if err != nil {
		return err
	}
	p.placer.Store(pl)
	p.built.Store(n)
	return nil
}
