package workload

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/alloc"
)

func shared(cpu, compute int64, models ...string) alloc.Shape {
	return alloc.Shape{CPUMilli: cpu, Count: 1, Demand: alloc.Demand{Compute: compute, Models: models}, Weight: 1}
}

func weights(shapes []alloc.Shape) map[string]int64 {
	out := map[string]int64{}
	for i := range shapes {
		out[shapeKey(&shapes[i])] = shapes[i].Weight
	}
	return out
}

// TestLearnerWarmup: before any pod the prior (one whole GPU) is the
// workload; after many pods of one shape the prior is cut by coverage.
func TestLearnerWarmup(t *testing.T) {
	l := NewLearner(Config{})
	got := l.Shapes()
	prior := WholeGPU()
	if len(got) != 1 || shapeKey(&got[0]) != shapeKey(&prior) {
		t.Fatalf("before any pod: %+v, want the whole-GPU prior alone", got)
	}
	half := shared(4000, 50)
	for i := range DefaultWarmup {
		l.Observe(string(rune('a'+i%26))+string(rune(i)), half)
	}
	w := weights(l.Shapes())
	if len(w) != 2 || w[shapeKey(&half)] < w[shapeKey(&prior)] {
		t.Fatalf("after %d pods: %v, want the pods' shape heavier than the prior", DefaultWarmup, w)
	}
	for i := range 20 * DefaultWarmup {
		l.Observe("", half)
		_ = i
	}
	if got := l.Shapes(); len(got) != 1 || shapeKey(&got[0]) != shapeKey(&half) {
		t.Errorf("after many pods of one shape: %+v, want that shape alone (the prior below 5%%)", got)
	}
}

// TestLearnerMix: Shapes keeps the heaviest shapes, Mix every one, each
// weighed alike: a rare pod bound to a model is in the mix alone.
func TestLearnerMix(t *testing.T) {
	l := NewLearner(Config{Prior: []alloc.Shape{shared(1000, 50)}, Warmup: 1})
	common, rare := shared(1000, 50), shared(1000, 60, "P100")
	for range 99 {
		l.Observe("", common)
	}
	l.Observe("", rare)
	shapes, mix := weights(l.Shapes()), weights(l.Mix())
	if _, ok := shapes[shapeKey(&rare)]; ok || len(shapes) != 1 {
		t.Errorf("Shapes %v, want the common shape alone (the rare one is under 5%%)", shapes)
	}
	if len(mix) != 2 || mix[shapeKey(&common)] != shapes[shapeKey(&common)] || mix[shapeKey(&rare)] < 1 {
		t.Errorf("Mix %v, want the common shape as Shapes weighs it (%v) and the rare one", mix, shapes)
	}
}

// TestLearnerCountsPodsWithoutGPUs: pods without GPUs are no shape of
// Shapes; Mix lists them last, as one shape of no GPUs, of their mean CPU,
// weighed as the GPU shapes are; a key seen before does not count again,
// and they do not count as observed pods (the GPU mix's window).
func TestLearnerCountsPodsWithoutGPUs(t *testing.T) {
	l := NewLearner(Config{Prior: []alloc.Shape{shared(1000, 50)}, Warmup: 1})
	gpu := shared(1000, 50)
	for i := range 100 {
		l.Observe("gpu-"+strconv.Itoa(i), gpu)
	}
	for i := range 50 {
		if !l.ObserveCPU("cpu-"+strconv.Itoa(i), int64(2000+4000*(i%2))) {
			t.Fatalf("pod cpu-%d did not count", i)
		}
	}
	if l.ObserveCPU("cpu-0", 2000) || l.ObserveCPU("gpu-0", 2000) {
		t.Error("a key seen before counted again")
	}
	if l.Observed() != 100 {
		t.Errorf("Observed = %d, want the 100 GPU pods", l.Observed())
	}
	for _, q := range l.Shapes() {
		if q.Count == 0 {
			t.Errorf("Shapes has %+v: want GPU shapes alone", q)
		}
	}
	mix := l.Mix()
	last := mix[len(mix)-1]
	// 50 pods without GPUs against 101 of the GPU shape (the prior's one
	// included), weighed as the latest GPU pod: a little over half the
	// GPU shape's weight, whose older pods have decayed.
	if last.Count != 0 || last.CPUMilli != 4000 || last.Weight < 495_000 || last.Weight > 515_000 {
		t.Errorf("Mix ends with %+v, want no GPUs, 4000 milli-CPU and about half of %d", last, mix[0].Weight)
	}
	if len(mix) != 2 || mix[0].Weight != 1_000_000 {
		t.Errorf("Mix %+v: want the GPU shape at 1e6, then the pods without GPUs", mix)
	}
	if m := NewLearner(Config{}).Mix(); len(m) != 1 || m[0].Count == 0 {
		t.Errorf("before any pod without GPUs: Mix %+v, want the prior alone", m)
	}

	// Pods without GPUs do not age the GPU mix: with a half-life of 100
	// pods, 100 pods of B after 100 of A weigh twice A however many pods
	// without GPUs came between them.
	a, b := shared(1000, 25), shared(1000, 75, "T4")
	aged := NewLearner(Config{HalfLife: 100, Prior: []alloc.Shape{a}, Warmup: 1})
	for range 100 {
		aged.Observe("", a)
	}
	for range 500 {
		aged.ObserveCPU("", 2000)
	}
	for range 100 {
		aged.Observe("", b)
	}
	w := weights(aged.Shapes())
	if ratio := float64(w[shapeKey(&b)]) / float64(w[shapeKey(&a)]); ratio < 1.9 || ratio > 2.1 {
		t.Errorf("B/A weight %.2f, want about 2 (weights %v)", ratio, w)
	}
}

// TestLearnerCountsEachPodOnce: a key seen before does not count again.
func TestLearnerCountsEachPodOnce(t *testing.T) {
	l := NewLearner(Config{})
	if !l.Observe("uid-1", shared(0, 10)) || l.Observe("uid-1", shared(0, 10)) {
		t.Error("the second observation of uid-1 counted")
	}
	if l.Observed() != 1 {
		t.Errorf("Observed = %d, want 1", l.Observed())
	}
}

// TestLearnerDecays: with a half-life of 100 pods, 100 pods of shape B
// after 100 of shape A weigh twice A (give or take the decay within each
// run), so the mix follows a change of workload.
func TestLearnerDecays(t *testing.T) {
	a, b := shared(1000, 25), shared(1000, 75, "T4")
	l := NewLearner(Config{HalfLife: 100, Prior: []alloc.Shape{a}, Warmup: 1})
	for range 100 {
		l.Observe("", a)
	}
	for range 100 {
		l.Observe("", b)
	}
	w := weights(l.Shapes())
	ratio := float64(w[shapeKey(&b)]) / float64(w[shapeKey(&a)])
	if ratio < 1.9 || ratio > 2.1 {
		t.Errorf("B/A weight %.2f, want about 2 (weights %v)", ratio, w)
	}
}

// TestShapeOf: the largest app container's GPUs and the pod's CPU; init
// containers and memory are left out; a pod without GPUs has no shape.
func TestShapeOf(t *testing.T) {
	req := &alloc.PodRequest{CPUMilli: 8000, MemoryMiB: 4096, Containers: []alloc.PodContainer{
		{ContainerRequest: alloc.ContainerRequest{Name: "init", Count: 4, Exclusive: true}, Kind: alloc.Init},
		{ContainerRequest: alloc.ContainerRequest{Name: "small", Compute: 10}},
		{ContainerRequest: alloc.ContainerRequest{Name: "big", Count: 2, MemoryMiB: 8192, Models: []string{"A100"}}},
	}}
	q, ok := ShapeOf(req)
	want := alloc.Shape{CPUMilli: 8000, Count: 2, Demand: alloc.Demand{MemoryMiB: 4096, Models: []string{"A100"}}, Weight: 1}
	if !ok || shapeKey(&q) != shapeKey(&want) {
		t.Errorf("ShapeOf = %+v, %v; want %+v", q, ok, want)
	}
	if _, ok := ShapeOf(&alloc.PodRequest{CPUMilli: 1000}); ok {
		t.Error("a pod without GPUs has a shape")
	}
}

// TestPolicyRebuilds: a learning policy's Placer follows the mix (a new
// Placer once the pods seen double, then every DefaultRefresh pods);
// binpack learns nothing and keeps one Placer.
func TestPolicyRebuilds(t *testing.T) {
	p, err := NewPolicy(alloc.Config{Node: "fgd-robust"}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	req := &alloc.PodRequest{Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "main", Compute: 30}}}}
	builds := 0
	last := p.Placer()
	for i := range 3 * DefaultRefresh {
		p.Observe(string(rune(i+1)), req)
		if pl := p.Placer(); pl != last {
			builds++
			last = pl
		}
	}
	// 1, 2, 4, ..., 128, then 256 and 384.
	if builds != 10 {
		t.Errorf("%d Placers built over %d pods, want 10", builds, 3*DefaultRefresh)
	}
	fixed, err := NewPolicy(alloc.Config{Node: "binpack"}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	pl := fixed.Placer()
	fixed.Observe("x", req)
	if fixed.Learns() || fixed.Placer() != pl {
		t.Error("binpack learned a workload")
	}
	if _, err := NewPolicy(alloc.Config{Node: "nope"}, Config{}); err == nil {
		t.Error("unknown policy: want an error")
	}
}

// supplySource is a SupplySource a test moves by hand.
type supplySource struct {
	supply []alloc.Supply
	gen    uint64
	reads  int
}

func (s *supplySource) Supply() ([]alloc.Supply, uint64) { s.reads++; return s.supply, s.gen }
func (s *supplySource) SupplyGeneration() uint64         { return s.gen }

// TestPolicyFollowsSupply: a fragmentation-aware policy's Placer weighs
// the source's supply, is rebuilt when the supply changes and reads it
// only when the generation moved; binpack ignores it.
func TestPolicyFollowsSupply(t *testing.T) {
	p, err := NewPolicy(alloc.Config{Node: "fgd-robust"}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	src := &supplySource{supply: []alloc.Supply{{Model: "T4", MemoryMiB: 15360, GPUs: 8}}, gen: 3}
	p.Follow(src)
	pl := p.Placer()
	if !cmp.Equal(pl.Supply(), src.supply) {
		t.Fatalf("Placer weighs %v, want %v", pl.Supply(), src.supply)
	}
	if p.Placer() != pl || src.reads != 1 {
		t.Errorf("generation unchanged: Placer rebuilt or supply read again (%d reads)", src.reads)
	}
	src.gen++ // same supply, new generation: read, not rebuilt
	if p.Placer() != pl || src.reads != 2 {
		t.Errorf("same supply: Placer rebuilt, or supply not read (%d reads)", src.reads)
	}
	src.supply, src.gen = []alloc.Supply{{Model: "T4", MemoryMiB: 15360, GPUs: 4}}, src.gen+1
	if next := p.Placer(); next == pl || !cmp.Equal(next.Supply(), src.supply) {
		t.Errorf("supply changed: Placer weighs %v, want %v", next.Supply(), src.supply)
	}

	fixed, err := NewPolicy(alloc.Config{Node: "binpack"}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	fixed.Follow(src)
	if fixed.Placer().Supply() != nil || src.reads != 3 {
		t.Error("binpack read or weighs a supply")
	}
}

// TestPolicyReadsFreeSupply: bookings do not move the source's
// generation, so the policy reads the supply again, for what is free of
// each model, once SupplyRefresh pods were observed since the last read,
// and not before; and not at all while no demand it weighs is bound to a
// model (the free share then changes nothing).
func TestPolicyReadsFreeSupply(t *testing.T) {
	supply := func(freeT4 int64) []alloc.Supply {
		return []alloc.Supply{{Model: "G2", MemoryMiB: 16384, GPUs: 8, Free: 8000}, {Model: "T4", MemoryMiB: 15360, GPUs: 8, Free: freeT4}}
	}
	pod := func(models ...string) *alloc.PodRequest {
		return &alloc.PodRequest{Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "c", Count: 1, Compute: 50, Models: models}}}}
	}
	for _, tc := range []struct {
		name  string
		pod   *alloc.PodRequest
		reads int // after SupplyRefresh pods
	}{{"bound to T4", pod("T4"), 2}, {"free", pod(), 1}} {
		p, err := NewPolicy(alloc.Config{Node: "fgd-robust"}, Config{})
		if err != nil {
			t.Fatal(err)
		}
		src := &supplySource{supply: supply(8000), gen: 1}
		p.Follow(src)
		pl := p.Placer()
		src.supply = supply(3500)
		for i := range SupplyRefresh - 1 {
			p.Observe(strconv.Itoa(i), tc.pod)
			if p.Placer(); src.reads != 1 {
				t.Fatalf("%s: read the supply again after %d pods, before %d", tc.name, i+1, SupplyRefresh)
			}
		}
		p.Observe("last", tc.pod)
		next := p.Placer()
		if src.reads != tc.reads {
			t.Errorf("%s: %d reads after %d pods, want %d", tc.name, src.reads, SupplyRefresh, tc.reads)
		}
		if tc.reads == 2 && (next == pl || !cmp.Equal(next.Supply(), src.supply)) {
			t.Errorf("%s: Placer weighs %v, want %v in a new Placer", tc.name, next.Supply(), src.supply)
		}
	}
}

// A pod's own pick of policy places by it, and spread differs from the
// cluster's binpack where it matters: two GPUs, one half full.
func TestPlacerFor(t *testing.T) {
	p, err := NewPolicy(alloc.Config{Node: "fgd-robust"}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if pl, err := p.PlacerFor("", ""); err != nil || pl != p.Placer() {
		t.Fatalf("no pick: %v, want the policy's own Placer", err)
	}
	spread, err := p.PlacerFor("", "spread")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := p.PlacerFor("", "spread"); again != spread {
		t.Error("PlacerFor built spread twice for one Placer")
	}
	binpack, err := p.PlacerFor("binpack", "binpack")
	if err != nil {
		t.Fatal(err)
	}
	node := &alloc.Node{Name: "n", CPUMilli: 8000, MemoryMiB: 8000, GPUs: []alloc.GPU{
		{Index: 0, UUID: "a", Model: "T4", MemoryMiB: 16000, Healthy: true, NUMANode: -1},
		{Index: 1, UUID: "b", Model: "T4", MemoryMiB: 16000, Healthy: true, NUMANode: -1}}}
	pod := &alloc.PodRequest{Key: "ns/p", Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "c", Count: 1, MemoryMiB: 1000}}}}
	for _, c := range []struct {
		pl   *alloc.Placer
		want int
	}{{spread, 1}, {binpack, 0}} {
		s := &alloc.NodeState{Node: node, GPUs: []alloc.Usage{{MemoryMiB: 8000}, {}}}
		placed, unfit := c.pl.Place(s, pod)
		if unfit != nil || placed.Containers[0].GPUs[0].GPU != c.want {
			t.Errorf("placed %+v (%v), want GPU %d", placed, unfit, c.want)
		}
	}
	if _, err := p.PlacerFor("", "topology-aware"); err == nil || !strings.Contains(err.Error(), `GPU policy "topology-aware" cannot be asked by a pod`) {
		t.Errorf("topology-aware: %v", err)
	}
}

// TestPolicyObservesPodsWithoutGPUs: a pod without GPUs reaches the
// learner's mix by its CPU, not as a GPU shape.
func TestPolicyObservesPodsWithoutGPUs(t *testing.T) {
	p, err := NewPolicy(alloc.Config{Node: "fgd-robust"}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	p.Observe("uid-0", &alloc.PodRequest{Key: "default/nothing"})
	if mix := p.Learner().Mix(); mix[len(mix)-1].Count == 0 {
		t.Errorf("Mix %+v after a pod that asks nothing: want no pods without GPUs", mix)
	}
	p.Observe("uid-1", &alloc.PodRequest{Key: "default/cpu", CPUMilli: 3000})
	mix := p.Learner().Mix()
	if last := mix[len(mix)-1]; last.Count != 0 || last.CPUMilli != 3000 {
		t.Errorf("Mix %+v: want it to end with the pod's 3000 milli-CPU and no GPUs", mix)
	}
	if p.Learner().Observed() != 0 {
		t.Errorf("Observed = %d, want 0 GPU pods", p.Learner().Observed())
	}
}

// roomSource is a supplySource that tells a room, as a test sets it.
type roomSource struct {
	supplySource
	room    alloc.Room
	waiting float64
	rooms   int
	spare   alloc.Spare // the last Spare asked about
}

func (s *roomSource) Room(sp *alloc.Spare) (alloc.Room, float64) {
	s.rooms++
	s.spare = *sp
	return s.room, s.waiting
}

// TestPolicyKeepsSpare: a policy with Config.Spare reads the room every
// SupplyRefresh pods, and its Placer keeps idle GPUs spare exactly while
// the room is short for the whole-GPU demand it learned; without
// Config.Spare, or with a source that tells no room, it keeps none.
func TestPolicyKeepsSpare(t *testing.T) {
	whole := &alloc.PodRequest{CPUMilli: 8000, Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "c", Count: 1, Exclusive: true}}}}
	share := &alloc.PodRequest{CPUMilli: 2000, Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "c", Count: 1, Compute: 50}}}}
	observe := func(p *Policy, from int) {
		for i := range 2 * SupplyRefresh {
			req := share
			if i%2 == 0 {
				req = whole
			}
			p.Observe(strconv.Itoa(from+i), req)
		}
	}
	supply := []alloc.Supply{{Model: "A100", MemoryMiB: 40960, GPUs: 16, Free: 4000}}
	p, err := NewPolicy(alloc.Config{Node: "fgd-robust"}, Config{Spare: true})
	if err != nil {
		t.Fatal(err)
	}
	src := &roomSource{supplySource: supplySource{supply: supply, gen: 1}, room: alloc.Room{Idle: 10, Free: 12}}
	p.Follow(src)
	src.room = alloc.Room{Idle: 2, Free: 12}
	for i := range DefaultWarmup - 1 {
		p.Observe(strconv.Itoa(-1-i), whole)
		if pl := p.Placer(); pl.Spare() != nil {
			t.Fatalf("after %d pods, fewer than the prior weighs: keeps idle GPUs spare on the prior's guess, %+v", i+1, pl.Spare())
		}
	}
	src.room = alloc.Room{Idle: 11, Free: 12}
	observe(p, 0)
	// Half the pods since ask a whole GPU, half a 0.5 share: most demand
	// is whole (with the prior's, under 0.9); the room's 11 idle GPUs are
	// more than that share of 12.
	pl := p.Placer()
	if src.rooms == 0 || pl.Spare() != nil {
		t.Fatalf("%d rooms read, spare %+v; want a read and none kept", src.rooms, pl.Spare())
	}
	if src.spare.Whole <= 2.0/3 || src.spare.Whole >= 0.9 || src.spare.WholeCPU <= 0 || src.spare.WholeCPU > 8000 {
		t.Errorf("weighed %+v, want whole-GPU demand between 2/3 (the pods') and 0.9, at up to 8 CPUs per GPU", src.spare)
	}
	src.room = alloc.Room{Idle: 2, Free: 12}
	observe(p, 1000)
	if pl := p.Placer(); pl.Spare() == nil || *pl.Spare() != src.spare {
		t.Fatalf("short room: spare %v; want the Spare weighed, %+v", pl.Spare(), src.spare)
	}
	src.waiting = 10 // the demand waiting takes the shortfall away
	if pl := p.Placer(); pl.Spare() == nil {
		t.Fatal("no pod observed since the last read: the room was read again")
	}
	// A pod turned away while GPUs were kept has the room read at once.
	p.Reread()
	if pl := p.Placer(); pl.Spare() != nil {
		t.Errorf("room short only with 10 GPUs waiting counted in: spare %+v, want none", pl.Spare())
	}

	for _, c := range []struct {
		name   string
		cfg    Config
		policy string
	}{{"without Config.Spare", Config{}, "fgd-robust"}, {"binpack", Config{Spare: true}, "binpack"}} {
		p, err := NewPolicy(alloc.Config{Node: c.policy}, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		src := &roomSource{supplySource: supplySource{supply: supply, gen: 1}, room: alloc.Room{Idle: 0, Free: 12}}
		p.Follow(src)
		observe(p, 0)
		if pl := p.Placer(); pl.Spare() != nil || src.rooms != 0 {
			t.Errorf("%s: keeps %+v after %d room reads, want none read", c.name, pl.Spare(), src.rooms)
		}
	}
	// A source without rooms: the policy keeps nothing.
	p, err = NewPolicy(alloc.Config{Node: "fgd-robust"}, Config{Spare: true})
	if err != nil {
		t.Fatal(err)
	}
	p.Follow(&supplySource{supply: supply, gen: 1})
	observe(p, 0)
	if pl := p.Placer(); pl.Spare() != nil {
		t.Errorf("no room source: keeps %+v", pl.Spare())
	}
}

// TestPolicyPressedWeighsSupplyNow: the rebuild that first makes the
// Placer weigh model-bound demand (Pressed) is followed by a read of the
// source, so that Placer weighs what is free now, not what was free at
// the last read, many pods before.
func TestPolicyPressedWeighsSupplyNow(t *testing.T) {
	supply := func(freeT4 int64) []alloc.Supply {
		return []alloc.Supply{{Model: "G2", MemoryMiB: 16384, GPUs: 8, Free: 8000}, {Model: "T4", MemoryMiB: 15360, GPUs: 8, Free: freeT4}}
	}
	pod := func(models ...string) *alloc.PodRequest {
		return &alloc.PodRequest{Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "c", Count: 1, Compute: 50, Models: models}}}}
	}
	p, err := NewPolicy(alloc.Config{Node: "fgd-robust"}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	src := &supplySource{supply: supply(8000), gen: 1}
	p.Follow(src)
	for i := range 300 {
		p.Observe(strconv.Itoa(i), pod())
		if p.Placer().Pressed() {
			t.Fatal("pods bound to no model pressed the Placer")
		}
	}
	src.supply = supply(1000)
	for i := range 1000 {
		p.Observe(strconv.Itoa(1000+i), pod("T4"))
		if pl := p.Placer(); pl.Pressed() {
			if !cmp.Equal(pl.Supply(), src.supply) {
				t.Errorf("the first pressed Placer, after %d pods bound to T4, weighs %v; want the supply now, %v", i+1, pl.Supply(), src.supply)
			}
			return
		}
	}
	t.Fatal("1000 pods bound to T4 never pressed the Placer")
}

// TestPolicySpareWeighsObservedPods: whether idle GPUs are kept is
// weighed on the pods observed, not the prior. After 212 shares of 0.1
// and 2 whole-GPU pods, the prior (one whole GPU, as 100 pods) would
// still make most of the demand whole and keep 3 idle GPUs of 20 free;
// the pods seen make it a tenth, and nothing is kept.
func TestPolicySpareWeighsObservedPods(t *testing.T) {
	whole := &alloc.PodRequest{CPUMilli: 8000, Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "c", Count: 1, Exclusive: true}}}}
	small := &alloc.PodRequest{CPUMilli: 1000, Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "c", Count: 1, Compute: 10}}}}
	p, err := NewPolicy(alloc.Config{Node: "fgd-robust"}, Config{Spare: true})
	if err != nil {
		t.Fatal(err)
	}
	src := &roomSource{supplySource: supplySource{supply: []alloc.Supply{{Model: "A100", MemoryMiB: 40960, GPUs: 24, Free: 20000}}, gen: 1},
		room: alloc.Room{Idle: 3, Free: 20}}
	p.Follow(src)
	for i := range 214 {
		req := small
		if i%107 == 50 {
			req = whole
		}
		p.Observe(strconv.Itoa(i), req)
	}
	if pl := p.Placer(); src.rooms == 0 || pl.Spare() != nil {
		t.Fatalf("%d rooms read, keeps %+v; want a read and none kept", src.rooms, pl.Spare())
	}
	if w := src.spare.Whole; w < 0.05 || w > 0.15 {
		t.Errorf("whole-GPU share of the demand weighed %.3f; want the pods' 2 of 23.2 GPUs, about 0.09", w)
	}
	mix := p.learner.ObservedMix()
	if len(mix) != 2 {
		t.Fatalf("observed mix %+v; want the two shapes seen, without the prior's", mix)
	}
}
