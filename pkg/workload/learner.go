package workload

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// Defaults of Config.
const (
	// DefaultHalfLife: a pod weighs half as much once 2,000 more GPU pods
	// have been seen; the window then holds about 2,900 pods' worth.
	DefaultHalfLife = 2000
	// DefaultWarmup: the prior weighs as much as 100 pods.
	DefaultWarmup = 100
	// DefaultCoverage: Shapes keeps the most frequent shapes that make
	// up 95% of the weight, as the FGD paper's target workload does.
	DefaultCoverage = 0.95
	// maxShapes bounds the shapes tracked; past it the lightest goes.
	maxShapes = 512
	// maxRemembered bounds the pod keys kept to count each pod once.
	maxRemembered = 1 << 16
)

// Config tunes a Learner. Zero fields take the defaults.
type Config struct {
	// HalfLife is the number of observed pods after which an observation
	// weighs half as much.
	HalfLife int64
	// Warmup is how many pods the prior weighs as: until the learner has
	// seen about that many, the prior still shapes the policy.
	Warmup int64
	// Prior is the workload assumed before any pod is seen (shapes from
	// configuration). Empty means one whole GPU per pod: the policy then
	// keeps idle GPUs whole and fills GPUs already in use, as binpack
	// does.
	Prior []alloc.Shape
	// Coverage is the share of weight Shapes keeps, most frequent first.
	Coverage float64
	// Spare has the policy keep idle GPUs spare for whole-GPU pods
	// (alloc.Spare) as the learned mix asks, when the source it follows
	// tells the room the nodes leave (RoomSource).
	Spare bool
	// KeepFor bounds how long a pod waits, from its creation, while idle
	// GPUs are kept from it (Policy.KeepFor); 0 means DefaultKeepFor.
	KeepFor time.Duration
}

// DefaultKeepFor is Config.KeepFor's default.
const DefaultKeepFor = time.Minute

// WholeGPU returns the built-in prior: a pod of one whole GPU.
func WholeGPU() alloc.Shape {
	return alloc.Shape{Count: 1, Demand: alloc.Demand{Exclusive: true}, Weight: 1}
}

// Learner learns the mix of GPU pod shapes from the pods a scheduler sees,
// in a decaying window: each pod observed weighs 2^(1/HalfLife) times the
// one before it, so recent pods count most and the mix follows a change
// of workload within a few half-lives. Each pod counts once (by its key).
// It is safe for concurrent use.
type Learner struct {
	cfg Config
	// growth is the factor between successive observations' weights.
	growth float64

	mu sync.Mutex
	// weight of each tracked shape, in units of scale's epoch.
	shapes map[string]*tracked
	// scale is the weight of the next observation.
	scale float64
	// observed counts the pods observed (not the prior).
	observed int64
	// cpuOnly is the weight of the pods without GPUs observed, and
	// cpuOnlyCPU their CPU (milli) times their weight. They weigh as the
	// next GPU pod will, and do not age the mix: the GPU shapes' window is
	// counted in GPU pods.
	cpuOnly, cpuOnlyCPU float64
	seen                map[string]struct{}
	ring                []string
	next                int
}

type tracked struct {
	shape  alloc.Shape
	weight float64
	// prior is the part of weight that the prior gave.
	prior float64
}

// NewLearner returns a learner that starts from c's prior.
func NewLearner(c Config) *Learner {
	if c.HalfLife <= 0 {
		c.HalfLife = DefaultHalfLife
	}
	if c.Warmup <= 0 {
		c.Warmup = DefaultWarmup
	}
	if c.Coverage <= 0 || c.Coverage > 1 {
		c.Coverage = DefaultCoverage
	}
	if len(c.Prior) == 0 {
		c.Prior = []alloc.Shape{WholeGPU()}
	}
	l := &Learner{cfg: c, growth: math.Exp2(1 / float64(c.HalfLife)), shapes: make(map[string]*tracked), scale: 1,
		seen: make(map[string]struct{})}
	var total int64
	for _, q := range c.Prior {
		total += max(q.Weight, 0)
	}
	for _, q := range c.Prior {
		if q.Weight > 0 && total > 0 {
			w := float64(c.Warmup) * float64(q.Weight) / float64(total)
			l.add(q, w)
			l.shapes[shapeKey(&q)].prior += w
		}
	}
	return l
}

// ShapeOf returns the shape of a pod for the learner: its CPU, the GPU
// count and per-GPU demand of its largest app container (by GPUs, then
// share), ok false for a pod without GPUs. Memory is left out, as in the
// FGD paper's workload: it makes shapes that differ only in memory one.
func ShapeOf(req *alloc.PodRequest) (alloc.Shape, bool) {
	best := -1
	var bestSize int64
	for i := range req.Containers {
		c := &req.Containers[i]
		if c.Kind == alloc.Init {
			continue
		}
		d := c.PerGPU()
		per := max(d.Compute*10, 0)
		if d.Exclusive {
			per = 1000
		}
		if size := int64(c.GPUCount())*1000 + per; best < 0 || size > bestSize {
			best, bestSize = i, size
		}
	}
	if best < 0 {
		return alloc.Shape{}, false
	}
	c := &req.Containers[best]
	return alloc.Shape{CPUMilli: req.CPUMilli, Count: c.GPUCount(), Demand: c.PerGPU(), Weight: 1}, true
}

// Observe counts a pod of shape q, seen under key (a pod's UID), unless
// that key was observed recently. It reports whether the pod counted.
func (l *Learner) Observe(key string, q alloc.Shape) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.first(key) {
		return false
	}
	l.add(q, l.scale)
	l.observed++
	l.scale *= l.growth
	if l.scale > 1e200 {
		// Rescale to keep the weights finite; ratios are unchanged.
		for _, t := range l.shapes {
			t.weight /= l.scale
			t.prior /= l.scale
		}
		l.cpuOnly /= l.scale
		l.cpuOnlyCPU /= l.scale
		l.scale = 1
	}
	return true
}

// ObserveCPU counts a pod without GPUs that asks cpuMilli of CPU, seen
// under key, unless that key was observed recently. It reports whether
// the pod counted. Such pods are no shape of Shapes: Mix lists them as one
// shape of no GPUs, of their mean CPU.
func (l *Learner) ObserveCPU(key string, cpuMilli int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.first(key) {
		return false
	}
	l.cpuOnly += l.scale
	l.cpuOnlyCPU += l.scale * float64(max(cpuMilli, 0))
	return true
}

// first reports whether key was not observed recently, and remembers
// it; an empty key is always first. Call with mu held.
func (l *Learner) first(key string) bool {
	if key == "" {
		return true
	}
	if _, dup := l.seen[key]; dup {
		return false
	}
	l.remember(key)
	return true
}

func (l *Learner) remember(key string) {
	if len(l.ring) < maxRemembered {
		l.ring = append(l.ring, key)
	} else {
		delete(l.seen, l.ring[l.next])
		l.ring[l.next] = key
		l.next = (l.next + 1) % maxRemembered
	}
	l.seen[key] = struct{}{}
}

func (l *Learner) add(q alloc.Shape, w float64) {
	k := shapeKey(&q)
	if t, ok := l.shapes[k]; ok {
		t.weight += w
		return
	}
	if len(l.shapes) >= maxShapes {
		l.dropLightest()
	}
	q.Weight = 0
	q.Demand.Models = slices.Clone(q.Demand.Models)
	l.shapes[k] = &tracked{shape: q, weight: w}
}

func (l *Learner) dropLightest() {
	var lightest string
	var w float64
	for k, t := range l.shapes {
		if lightest == "" || t.weight < w || (t.weight == w && k < lightest) {
			lightest, w = k, t.weight
		}
	}
	delete(l.shapes, lightest)
}

// Observed returns how many pods the learner has counted.
func (l *Learner) Observed() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.observed
}

// Shapes returns the learned workload: the heaviest shapes, heaviest
// first, until they make up the configured coverage of the weight; each
// weight is in millionths of the heaviest (at least 1).
func (l *Learner) Shapes() []alloc.Shape {
	out, _, _, _ := l.shapesCovering(l.cfg.Coverage)
	return out
}

// Mix returns every shape tracked, weighed as Shapes weighs them: the
// whole workload, of which Shapes is the heaviest part (alloc.Options.Mix),
// and last, if any were observed, the pods without GPUs as one shape of
// their mean CPU (ObserveCPU).
func (l *Learner) Mix() []alloc.Shape {
	out, heaviest, cpuOnly, cpuOnlyCPU := l.shapesCovering(1)
	if cpuOnly > 0 && heaviest > 0 {
		out = append(out, alloc.Shape{CPUMilli: int64(math.Round(cpuOnlyCPU / cpuOnly)),
			Weight: max(1, int64(math.Round(1e6*cpuOnly/heaviest)))})
	}
	return out
}

// ObservedMix returns the shapes of the pods observed, without the
// prior's weight, weighed in millionths of the heaviest, in the order of
// their keys: what was seen, not guessed, for alloc.SpareOf. Keeping
// idle GPUs for whole-GPU pods that the prior alone expects would keep
// them from a cluster that runs none.
func (l *Learner) ObservedMix() []alloc.Shape {
	l.mu.Lock()
	keys := make([]string, 0, len(l.shapes))
	var heaviest float64
	for k, t := range l.shapes {
		if w := t.weight - t.prior; w > 0 {
			keys = append(keys, k)
			heaviest = max(heaviest, w)
		}
	}
	slices.Sort(keys)
	out := make([]alloc.Shape, len(keys))
	for i, k := range keys {
		t := l.shapes[k]
		out[i] = t.shape
		out[i].Weight = max(1, int64(math.Round(1e6*(t.weight-t.prior)/heaviest)))
	}
	l.mu.Unlock()
	return out
}

// shapesCovering returns the heaviest shapes that make up coverage of the
// weight, weighed in millionths of the heaviest, and read in the same
// lock: the heaviest's weight, and the pods without GPUs' (cpuOnly,
// cpuOnlyCPU).
func (l *Learner) shapesCovering(coverage float64) (out []alloc.Shape, heaviest, cpuOnly, cpuOnlyCPU float64) {
	l.mu.Lock()
	type entry struct {
		key string
		t   tracked
	}
	all := make([]entry, 0, len(l.shapes))
	var total float64
	for k, t := range l.shapes {
		all = append(all, entry{k, *t})
		total += t.weight
	}
	cpuOnly, cpuOnlyCPU = l.cpuOnly, l.cpuOnlyCPU
	l.mu.Unlock()
	slices.SortFunc(all, func(a, b entry) int {
		return cmp.Or(cmp.Compare(b.t.weight, a.t.weight), strings.Compare(a.key, b.key))
	})
	if len(all) == 0 {
		return nil, 0, cpuOnly, cpuOnlyCPU
	}
	heaviest = all[0].t.weight
	var covered float64
	for _, e := range all {
		if covered >= coverage*total {
			break
		}
		q := e.t.shape
		q.Weight = max(1, int64(math.Round(1e6*e.t.weight/heaviest)))
		out = append(out, q)
		covered += e.t.weight
	}
	return out, heaviest, cpuOnly, cpuOnlyCPU
}

// shapeKey identifies a shape without its weight.
func shapeKey(q *alloc.Shape) string {
	d := &q.Demand
	var b strings.Builder
	for _, v := range []int64{q.CPUMilli, q.MemoryMiB, int64(q.Count), d.MemoryMiB, d.Compute} {
		b.WriteString(strconv.FormatInt(v, 10))
		b.WriteByte(',')
	}
	b.WriteString(strconv.FormatBool(d.Exclusive))
	b.WriteByte(',')
	b.WriteString(strconv.FormatBool(d.MPS))
	for _, m := range slices.Sorted(slices.Values(d.Models)) {
		b.WriteByte('|')
		b.WriteString(m)
	}
	return b.String()
}
