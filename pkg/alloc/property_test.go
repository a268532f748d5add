package alloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var policyNames = []string{"binpack", "spread", "random", "bestfit", "fgd", "fgd-pack", "fgd-fill", "fgd-robust"}

// randomCluster builds a few nodes of mixed GPU sizes from r.
func randomCluster(r *rand.Rand) []*NodeState {
	states := make([]*NodeState, 1+r.IntN(4))
	for i := range states {
		b := makeNode(fmt.Sprintf("n%d", i)).cpu(int64(8000 + r.IntN(64_000)))
		for range 1 + r.IntN(8) {
			b.gpus(1, []string{"A100", "T4", "L4"}[r.IntN(3)], int64(1024+r.IntN(80_000)))
		}
		if r.IntN(8) == 0 {
			b.unhealthy(0)
		}
		if r.IntN(6) == 0 {
			b.wholeCard()
		}
		if len(b.n.GPUs) > 1 && r.IntN(2) == 0 {
			b.link(0, 1)
		}
		states[i] = b.state()
	}
	return states
}

// randomPod builds a pod of 1-3 containers, some init or sidecar.
func randomPod(r *rand.Rand, k int) *PodRequest {
	b := makePod(fmt.Sprintf("ns/p%d", k)).cpu(int64(r.IntN(8000)))
	for c := range 1 + r.IntN(3) {
		req := ContainerRequest{Name: fmt.Sprintf("c%d", c), Count: r.IntN(3)}
		if r.IntN(4) == 0 {
			req.Exclusive = true
		} else {
			req.MemoryMiB = int64(r.IntN(40_000))
			if r.IntN(5) == 0 {
				req.MemoryMiB, req.MemoryPercent = 0, int64(1+r.IntN(100))
			}
			req.Compute = int64(r.IntN(101))
			if req.MemoryMiB == 0 && req.Compute == 0 {
				req.Compute = 1
			}
		}
		if r.IntN(5) == 0 {
			req.Models = []string{"T4"}
		}
		b.container(ContainerKind(r.IntN(3)), req)
	}
	return b.obj()
}

// checkCapacity fails if any GPU is booked past its memory or compute.
func checkCapacity(t *testing.T, states []*NodeState) {
	t.Helper()
	for _, s := range states {
		for i, u := range s.GPUs {
			g := &s.Node.GPUs[i]
			if u.MemoryMiB < 0 || u.Compute < 0 || u.MemoryMiB > g.MemoryMiB || u.Compute > g.ComputeCapacity() {
				t.Fatalf("node %s gpu %d booked %+v of %d MiB / %d%%", s.Node.Name, i, u, g.MemoryMiB, g.ComputeCapacity())
			}
		}
		if s.CPUMilli > s.Node.CPUMilli {
			t.Fatalf("node %s CPU booked %d of %d", s.Node.Name, s.CPUMilli, s.Node.CPUMilli)
		}
	}
}

// replayRandom places pods until one fails to fit anywhere several times,
// checking capacity after each, and returns the placements in order.
func replayRandom(t *testing.T, seed uint64, policy string) ([]*NodeState, []*Placement) {
	r := rand.New(rand.NewPCG(seed, 7))
	states := randomCluster(r)
	pl, err := NewPlacer(Config{Node: policy, Options: Options{Seed: seed, Workload: []Shape{
		{CPUMilli: 1000, Count: 1, Demand: Demand{MemoryMiB: 4096, Compute: 20}, Weight: 5},
		{Count: 2, Demand: Demand{Exclusive: true}, Weight: 1},
		{CPUMilli: 2000, Weight: 1},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var placed []*Placement
	for k := range 40 {
		pod := randomPod(r, k)
		if err := pod.Validate(); err != nil {
			t.Fatalf("generated an invalid pod: %v", err)
		}
		if r.IntN(10) == 0 {
			// Health changes as the scheduler cache changes it for a
			// conflicting booking, with a new Node: memoised ratings
			// must notice.
			s := states[r.IntN(len(states))]
			n := *s.Node
			n.GPUs = slices.Clone(n.GPUs)
			g := &n.GPUs[r.IntN(len(n.GPUs))]
			g.Healthy = !g.Healthy
			s.Node = &n
		}
		d := pl.Pick(states, pod, seed)
		checkRater(t, pl, states, pod, (*Rater).Rate)
		checkRater(t, pl, states, pod, rateSummarized)
		if d.Index < 0 {
			if len(pl.Explain(states, pod)) != len(states) {
				t.Fatalf("pod %s fits nowhere, but Explain does not reject every node", pod.Key)
			}
			continue
		}
		if got := Booking(d.Placement.Containers); !equalAssignments(got, d.Placement.Booked) {
			t.Fatalf("pod %s: Booking(containers) = %v, Place booked %v", pod.Key, got, d.Placement.Booked)
		}
		if err := states[d.Index].Apply(d.Placement); err != nil {
			t.Fatalf("Apply(%s): %v", pod.Key, err)
		}
		checkCapacity(t, states)
		placed = append(placed, d.Placement)
	}
	return states, placed
}

// release returns every placement in a seeded random order.
func release(t *testing.T, states []*NodeState, placed []*Placement, seed uint64) {
	byName := make(map[string]*NodeState, len(states))
	for _, s := range states {
		byName[s.Node.Name] = s
	}
	r := rand.New(rand.NewPCG(seed, 11))
	r.Shuffle(len(placed), func(a, b int) { placed[a], placed[b] = placed[b], placed[a] })
	for _, p := range placed {
		if err := byName[p.Node].Release(p); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

func invariants(t *testing.T, seed uint64) {
	for _, policy := range policyNames {
		states, placed := replayRandom(t, seed, policy)
		// The same seed gives the same placements.
		_, again := replayRandom(t, seed, policy)
		if diff := cmp.Diff(placed, again); diff != "" {
			t.Fatalf("%s: seed %d placed differently the second time (-first,+second):\n%s", policy, seed, diff)
		}
		// Allocate-then-release is the identity.
		release(t, states, placed, seed)
		for _, s := range states {
			if s.CPUMilli != 0 || s.MemoryMiB != 0 || cmp.Diff(make([]Usage, len(s.GPUs)), s.GPUs) != "" {
				t.Fatalf("%s: seed %d: node %s not empty after releasing everything: %+v", policy, seed, s.Node.Name, s)
			}
		}
	}
}

func TestInvariants(t *testing.T) {
	for seed := range uint64(200) {
		invariants(t, seed)
	}
}

func FuzzInvariants(f *testing.F) {
	for _, s := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { invariants(t, seed) })
}

// FuzzApply feeds arbitrary placements to Apply and Release: they must
// either succeed and keep capacity, or fail and change nothing.
func FuzzApply(f *testing.F) {
	f.Add(0, int64(100), int64(10), int64(0), int64(0))
	f.Add(3, int64(-5), int64(200), int64(1), int64(1))
	f.Fuzz(func(t *testing.T, gpu int, mib, compute, cpu, mem int64) {
		s := makeNode("n").gpus(2, "A100", 16384).state(Usage{MemoryMiB: 100, Compute: 10})
		before := s.Clone()
		p := &Placement{Node: "n", CPUMilli: cpu, MemoryMiB: mem, Booked: []Assignment{{GPU: gpu, Usage: Usage{MemoryMiB: mib, Compute: compute}}}}
		if err := s.Apply(p); err != nil {
			if diff := cmp.Diff(before, s, cmpopts.IgnoreUnexported(NodeState{})); diff != "" {
				t.Fatalf("failed Apply changed the state:\n%s", diff)
			}
			return
		}
		checkCapacity(t, []*NodeState{s})
		if err := s.Release(p); err != nil {
			t.Fatalf("Release after Apply: %v", err)
		}
		if diff := cmp.Diff(before, s, cmpopts.IgnoreUnexported(NodeState{})); diff != "" {
			t.Fatalf("Apply then Release is not the identity:\n%s", diff)
		}
	})
}

func equalAssignments(a, b []Assignment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// rateSummarized rates s by RateSummary, with the Summary its owner
// would hold.
func rateSummarized(r *Rater, s *NodeState) (Rating, *Unfit) {
	sum := s.Summarize()
	return r.RateSummary(s, &sum)
}

// checkRater: a Rater, rating by rate, agrees with Place on every node and, for
// shape-only policies, on a twin of each (another name, the same shape and
// bookings, so the same score), rated concurrently after the originals,
// so that the Rater answers the twins from what it learnt of the
// originals. The tie-break key is TieBreak's.
// Place runs on a copy without the memo, so memoised data must match
// fresh data.
func checkRater(t *testing.T, pl *Placer, states []*NodeState, pod *PodRequest, rate func(*Rater, *NodeState) (Rating, *Unfit)) {
	t.Helper()
	const seed = 7
	r := pl.NewRater(pod, seed)
	placed := make([]*Placement, len(states))
	for i, s := range states {
		cold := &NodeState{Node: s.Node, CPUMilli: s.CPUMilli, MemoryMiB: s.MemoryMiB, GPUs: slices.Clone(s.GPUs)}
		p, unfit := pl.Place(cold, pod)
		got, rateUnfit := rate(r, s)
		switch {
		case (unfit == nil) != (rateUnfit == nil):
			t.Fatalf("pod %s on %s: Place unfit %t, Rater unfit %t", pod.Key, s.Node.Name, unfit != nil, rateUnfit != nil)
		case unfit != nil && unfit.Error() != rateUnfit.Error():
			t.Fatalf("pod %s on %s: Place says %q, Rater says %q", pod.Key, s.Node.Name, unfit.Error(), rateUnfit.Error())
		case unfit == nil && (p.Score != got.Score || got.Tie != TieBreak(pod.Key, s.Node.Name, seed)):
			t.Fatalf("pod %s on %s: Place scores %v, Rater %+v", pod.Key, s.Node.Name, p.Score, got)
		}
		placed[i] = p
	}
	if !pl.byShape {
		return // the Rater looks no shapes up
	}
	errs := make([]error, len(states))
	var wg sync.WaitGroup
	for i, s := range states {
		twin := s.Clone()
		n := *s.Node
		n.Name += "-twin"
		twin.Node = &n
		// A name-keyed policy scores the twin with its own name bits:
		// Place on a cold copy of the twin says what it should get.
		if pl.renames {
			placed[i], _ = pl.Place(&NodeState{Node: &n, CPUMilli: s.CPUMilli, MemoryMiB: s.MemoryMiB, GPUs: slices.Clone(s.GPUs)}, pod)
		}
		wg.Go(func() {
			got, unfit := rate(r, twin)
			switch p := placed[i]; {
			case (p == nil) != (unfit != nil):
				errs[i] = fmt.Errorf("pod %s on %s: Place fits %t, Rater unfit %t", pod.Key, n.Name, p != nil, unfit != nil)
			case p != nil && (p.Score != got.Score || got.Tie != TieBreak(pod.Key, n.Name, seed)):
				errs[i] = fmt.Errorf("pod %s on %s: Place scores %v, Rater %+v", pod.Key, n.Name, p.Score, got)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestPickParallel: a Pick over enough nodes to be split among workers
// chooses what one sequential scan chooses.
func TestPickParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	var states []*NodeState
	for len(states) < 5*pickChunkBounded/2 {
		states = append(states, randomCluster(r)...)
	}
	for i, s := range states {
		s.Node.Name = fmt.Sprintf("n%04d", i)
	}
	for _, policy := range policyNames {
		pl, err := NewPlacer(Config{Node: policy, Options: Options{Seed: 1, Workload: []Shape{
			{CPUMilli: 1000, Count: 1, Demand: Demand{MemoryMiB: 4096, Compute: 20}, Weight: 5},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		for k := range 30 {
			pod := randomPod(r, k)
			d := pl.Pick(states, pod, 1)
			want := pl.pickRange(states, 0, pod, 1)
			if d.Index != want.index {
				t.Fatalf("%s: pod %s: parallel Pick chose %d, a sequential scan %d", policy, pod.Key, d.Index, want.index)
			}
			if d.Index >= 0 {
				if err := states[d.Index].Apply(d.Placement); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestPickByShape checks Pick, which rates nodes of one shape once for
// shape-only policies, against rating every node on its own: clones of a
// few nodes under other names, booked alike or apart, some with live
// samples or a GPU's health changed. Each policy is checked as it is and
// as FirstFit, for claims.
func TestPickByShape(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, name := range append(policyNames, "load-aware") {
		base, err := NewPlacer(Config{Node: name, Options: Options{Seed: 3, Workload: []Shape{
			{CPUMilli: 1000, Count: 1, Demand: Demand{MemoryMiB: 4096, Compute: 20}, Weight: 5},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, firstFit := range []bool{false, true} {
			pl, policy := base, name
			if firstFit {
				pl, policy = base.FirstFit(), name+" (first fit)"
			}
			// fgd-pack, fgd-fill and fgd-robust rate by shape but for their name bits.
			if want := name != "random"; pl.byShape != want {
				t.Fatalf("%s: rates by shape %v, want %v", policy, pl.byShape, want)
			}
			checkPickByShape(t, r, pl, policy)
		}
	}
}

// checkPickByShape is TestPickByShape for one placer.
func checkPickByShape(t *testing.T, r *rand.Rand, pl *Placer, policy string) {
	t.Helper()
	var states []*NodeState
	for _, s := range randomCluster(r) {
		for range 2 * shapeProbe {
			states = append(states, NewNodeState(s.Node))
		}
	}
	for i, s := range states {
		n := *s.Node
		n.Name = fmt.Sprintf("n%04d", i)
		s.Node = &n
		if i%3 == 0 {
			s.CPUMilli = int64(r.IntN(int(n.CPUMilli)))
		}
	}
	for k := range 60 {
		s := states[r.IntN(len(states))]
		switch r.IntN(6) {
		case 0:
			n := *s.Node
			n.GPUs = slices.Clone(n.GPUs)
			n.GPUs[0].Healthy = !n.GPUs[0].Healthy
			s.Node = &n
		case 1, 2:
			s.Live = make([]Live, len(s.GPUs))
			s.Live[0] = Live{Valid: true, MemoryMiB: s.Node.GPUs[0].MemoryMiB / 2, Utilization: 90}
		}
		pod := randomPod(r, k)
		d := pl.Pick(states, pod, 3)
		want, wantTie := -1, uint64(0)
		var wantScore Score
		for i, s := range states {
			p, _ := pl.Place(s, pod)
			if p == nil {
				continue
			}
			tie := TieBreak(pod.Key, s.Node.Name, 3)
			if c := p.Score.Compare(wantScore); want < 0 || c > 0 || c == 0 && tie > wantTie {
				want, wantScore, wantTie = i, p.Score, tie
			}
		}
		if d.Index != want {
			t.Fatalf("%s: pod %s: Pick chose %d, rating each node %d", policy, pod.Key, d.Index, want)
		}
		if d.Index >= 0 {
			if err := states[d.Index].Apply(d.Placement); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestShapeCoversNode fails when Node or GPU gains a field: shapeOf must
// encode it, or it must be one of the names that shape-only policies
// may not read.
func TestShapeCoversNode(t *testing.T) {
	for _, c := range []struct {
		v    any
		want []string
	}{
		{Node{}, []string{"Name", "CPUMilli", "MemoryMiB", "Mode", "GPUs"}},
		{GPU{}, []string{"Index", "UUID", "Model", "MemoryMiB", "Compute", "NUMANode", "Peers", "Healthy", "MPS"}},
	} {
		typ := reflect.TypeOf(c.v)
		var got []string
		for i := range typ.NumField() {
			got = append(got, typ.Field(i).Name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s has fields %v, shapeOf knows %v: encode the new ones in shapeOf (or list them here as names)", typ.Name(), got, c.want)
		}
	}
	n := &makeNode("a").cpu(8000).gpus(2, "A100", 40960).numa(0, 1).link(0, 1).n
	base := shapeOf(n, make([]Usage, 2))
	renamed := *n
	renamed.Name = "b"
	renamed.GPUs = slices.Clone(n.GPUs)
	renamed.GPUs[1].UUID = "GPU-other"
	if shapeOf(&renamed, make([]Usage, 2)) != base {
		t.Error("a node's name or its GPUs' UUIDs change its shape")
	}
	for name, change := range map[string]func(*Node, []Usage){
		"CPU":       func(n *Node, _ []Usage) { n.CPUMilli++ },
		"memory":    func(n *Node, _ []Usage) { n.MemoryMiB++ },
		"mode":      func(n *Node, _ []Usage) { n.Mode = WholeCard },
		"model":     func(n *Node, _ []Usage) { n.GPUs[1].Model = "H100" },
		"GPU size":  func(n *Node, _ []Usage) { n.GPUs[1].MemoryMiB++ },
		"compute":   func(n *Node, _ []Usage) { n.GPUs[1].Compute = 50 },
		"health":    func(n *Node, _ []Usage) { n.GPUs[1].Healthy = false },
		"MPS":       func(n *Node, _ []Usage) { n.GPUs[1].MPS = true },
		"NUMA":      func(n *Node, _ []Usage) { n.GPUs[1].NUMANode = 0 },
		"NVLink":    func(n *Node, _ []Usage) { n.GPUs[0].Peers, n.GPUs[1].Peers = nil, nil },
		"usage":     func(_ *Node, u []Usage) { u[1].Compute = 10 },
		"GPU count": func(n *Node, _ []Usage) { n.GPUs = n.GPUs[:1] },
	} {
		m := *n
		m.GPUs = slices.Clone(n.GPUs)
		u := make([]Usage, 2)
		change(&m, u)
		if shapeOf(&m, u[:len(m.GPUs)]) == base {
			t.Errorf("changing the %s leaves the shape alike", name)
		}
	}
}

// TestBoundsHold checks that a policy's bound is at least the score of
// every placement, on random clusters filled by random pods, a third of
// them without GPUs (fgd bounds only those). The workload binds some
// demand to a scarce model, so fgd-robust weighs a supply.
func TestBoundsHold(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 17))
	supply := SupplyOf([]*Node{
		&makeNode("a").gpus(8, "A100", 40_000).n, &makeNode("t").gpus(2, "T4", 16_000).n,
	})
	for _, policy := range NodePolicies() {
		pl, err := NewPlacer(Config{Node: policy, Options: Options{Seed: 5, Supply: supply, Workload: []Shape{
			{CPUMilli: 1000, Count: 1, Demand: Demand{MemoryMiB: 4096, Compute: 20}, Weight: 5},
			{CPUMilli: 8000, MemoryMiB: 65_536, Count: 1, Demand: Demand{Compute: 50, Models: []string{"T4"}}, Weight: 3},
			{CPUMilli: 4000, MemoryMiB: 8192, Weight: 2},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if pl.bounder == nil {
			continue
		}
		checked, cpuOnly := 0, 0
		for range 60 {
			states := randomCluster(r)
			for k := range 40 {
				pod := randomPod(r, k)
				if r.IntN(3) == 0 {
					pod = makePod(fmt.Sprintf("ns/cpu%d", k)).cpu(int64(r.IntN(16_000))).obj()
					pod.MemoryMiB = int64(r.IntN(64 << 10))
				}
				for _, s := range states {
					p, _ := pl.Place(s, pod)
					if p == nil {
						continue
					}
					checked++
					if pl.bounds(pod) {
						cpuOnly++
					}
					if b := pl.bounder.bound(s, s.summary(), pod, demandsOf(pod, nil)); b.Compare(p.Score) < 0 {
						t.Fatalf("%s: pod %s on %s: bound %v below the placement's score %v", policy, pod.Key, s.Node.Name, b, p.Score)
					}
					if r.IntN(2) == 0 {
						if err := s.Apply(p); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
		if checked < 500 || cpuOnly < 500 {
			t.Fatalf("%s: only %d placements checked, %d of them of pods bounded", policy, checked, cpuOnly)
		}
	}

	// A node of unknown CPU counts record.Unlimited (2^40 milli-CPU); times
	// a learned weight, the CPU's GPU room passes int64. Wrapped, it once
	// capped the node's usable share below what a pod without GPUs left,
	// and fgd-robust's score rose past the bound.
	pl, err := NewPlacer(Config{Node: "fgd-robust", Options: Options{Workload: []Shape{
		{CPUMilli: 4000, Count: 1, Demand: Demand{Compute: 50}, Weight: 771752},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	s := makeNode("unknown-cpu").cpu(1<<40).gpus(1, "A100", 16384).state()
	s.CPUMilli = 91180 - 5000
	pod := makePod("ns/cpu").cpu(10_000).obj()
	p, _ := pl.Place(s, pod)
	if p == nil {
		t.Fatal("a pod without GPUs does not fit a node of unknown CPU")
	}
	if b := pl.bounder.bound(s, s.summary(), pod, nil); b.Compare(p.Score) < 0 {
		t.Errorf("node of unknown CPU: bound %v below the placement's score %v", b, p.Score)
	}
}
