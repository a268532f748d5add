package alloc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// cluster is nodes of 16384 MiB GPUs with pods booked on them, for
// defragmentation plans.
type cluster struct {
	t       *testing.T
	pl      *Placer
	states  []*NodeState
	movable []Movable
}

func newCluster(t *testing.T, gpus ...int) *cluster {
	c := &cluster{t: t, pl: mustPlacer("binpack")}
	for i, n := range gpus {
		c.states = append(c.states, makeNode(fmt.Sprintf("n%d", i)).gpus(n, "T4", 16384).state())
	}
	return c
}

// book puts a pod of one shared container of mib on GPU gpu of node
// node; movable pods are offered to the plan.
func (c *cluster) book(key string, node, gpu int, mib int64, movable bool) {
	c.t.Helper()
	req := makePod(key).shared("c", mib, 0).obj()
	s := c.states[node]
	p := &Placement{Node: s.Node.Name, Containers: []ContainerPlacement{{Name: "c", Kind: App,
		GPUs: []Assignment{{GPU: gpu, UUID: s.Node.GPUs[gpu].UUID, Usage: Usage{MemoryMiB: mib}}}}}}
	p.Booked = Booking(p.Containers)
	if err := s.Apply(p); err != nil {
		c.t.Fatal(err)
	}
	if movable {
		c.movable = append(c.movable, Movable{Key: key, Node: node, Request: req, Placement: p})
	}
}

func (c *cluster) plan(pod *PodRequest, b DefragBudget) *DefragPlan {
	if d := c.pl.Pick(c.states, pod, 1); d.Placement != nil {
		c.t.Fatalf("the pod fits node %d without a plan", d.Index)
	}
	return c.pl.PlanDefrag(c.states, pod, c.movable, b, 1)
}

// check applies plan to copies of the states, in order, and checks that
// nothing over-commits, no pod moves to the node it leaves, and the pod
// lands on the target.
func (c *cluster) check(p *DefragPlan) {
	c.t.Helper()
	work := make([]*NodeState, len(c.states))
	for i, s := range c.states {
		work[i] = s.Clone()
	}
	for _, m := range p.Moves {
		var from *Movable
		for i := range c.movable {
			if c.movable[i].Key == m.Key {
				from = &c.movable[i]
			}
		}
		if from == nil || m.From != from.Node || m.To == m.From {
			c.t.Fatalf("move %+v: not a movable pod's, or to the node it leaves", m)
		}
		if err := work[m.From].Release(from.Placement); err != nil {
			c.t.Fatal(err)
		}
		if err := work[m.To].Apply(m.Placement); err != nil {
			c.t.Fatalf("move %s to node %d: %v", m.Key, m.To, err)
		}
	}
	if err := work[p.Target].Apply(p.Placement); err != nil {
		c.t.Fatalf("the pod on node %d: %v", p.Target, err)
	}
}

func TestPlanDefrag(t *testing.T) {
	whole := makePod("w").whole("c", 1).obj()
	budget := DefragBudget{MaxMoves: 3}

	t.Run("one move", func(t *testing.T) {
		// n0's GPUs hold 8192 each (movable); n1's hold 8192 each (fixed).
		c := newCluster(t, 2, 2)
		c.book("a", 0, 0, 8192, true)
		c.book("b", 0, 1, 8192, true)
		c.book("x", 1, 0, 8192, false)
		c.book("y", 1, 1, 8192, false)
		p := c.plan(whole, budget)
		if p == nil || len(p.Moves) != 1 || p.Target != 0 || p.Moves[0].To != 1 || p.MovedMiB != 8192 {
			t.Fatalf("plan %+v, want one 8192 MiB pod moved from n0 to n1", p)
		}
		c.check(p)
	})
	t.Run("only nodes the pods may run on", func(t *testing.T) {
		// As "the cheapest node", where n1 is the cheapest target; but
		// the waiting pod may not run on n1 (its node selector, say):
		// n0 is made room on. Its pods may run on n3, not on n1 or n2.
		c := newCluster(t, 2, 2, 2, 2)
		c.book("a1", 0, 0, 4096, true)
		c.book("a2", 0, 0, 4096, true)
		c.book("a3", 0, 1, 9000, false)
		c.book("b1", 1, 0, 12288, true)
		c.book("b2", 1, 1, 9000, false)
		c.book("z1", 2, 0, 4096, false)
		c.book("z2", 2, 1, 4096, false)
		c.book("y1", 3, 0, 12000, false)
		c.book("y2", 3, 1, 4096, false)
		for i := range c.movable {
			c.movable[i].Fits = func(node int) bool { return node == 0 || node == 3 }
		}
		b := budget
		b.Fits = func(node int) bool { return node != 1 }
		p := c.plan(whole, b)
		if p == nil || p.Target != 0 || len(p.Moves) != 2 {
			t.Fatalf("plan %+v, want a1 and a2 moved off n0", p)
		}
		for _, m := range p.Moves {
			if m.To != 3 {
				t.Errorf("move %s to n%d; want n3, the only node it may run on with room", m.Key, m.To)
			}
		}
		c.check(p)
		// Nowhere the pods may go: no plan.
		for i := range c.movable {
			c.movable[i].Fits = func(node int) bool { return node == 0 }
		}
		if p := c.plan(whole, b); p != nil {
			t.Fatalf("plan %+v, want none: the pods on n0 may run nowhere else", p)
		}
	})
	t.Run("the cheapest node", func(t *testing.T) {
		// n0 needs two moves (4096 + 4096 on GPU 0; GPU 1 is fixed), n1
		// one (12288, more memory); n2 takes what moves.
		c := newCluster(t, 2, 2, 2)
		c.book("a1", 0, 0, 4096, true)
		c.book("a2", 0, 0, 4096, true)
		c.book("a3", 0, 1, 9000, false)
		c.book("b1", 1, 0, 12288, true)
		c.book("b2", 1, 1, 9000, false)
		c.book("z1", 2, 0, 4096, false)
		c.book("z2", 2, 1, 4096, false)
		p := c.plan(whole, budget)
		if p == nil || len(p.Moves) != 1 || p.Target != 1 || p.Moves[0].Key != "b1" {
			t.Fatalf("plan %+v, want b1 moved off n1", p)
		}
		c.check(p)
	})
	t.Run("fewest pods, then least memory", func(t *testing.T) {
		// Both nodes need one move: n1's pod holds less.
		c := newCluster(t, 1, 1, 1)
		c.book("big", 0, 0, 10000, true)
		c.book("small", 1, 0, 2000, true)
		c.book("z", 2, 0, 4000, false)
		p := c.plan(whole, budget)
		if p == nil || len(p.Moves) != 1 || p.Moves[0].Key != "small" || p.MovedMiB != 2000 {
			t.Fatalf("plan %+v, want the 2000 MiB pod moved", p)
		}
		c.check(p)
	})
	t.Run("two moves", func(t *testing.T) {
		c := newCluster(t, 1, 2)
		c.book("a", 0, 0, 6000, true)
		c.book("b", 0, 0, 6000, true)
		c.book("x", 1, 0, 10000, false)
		c.book("y", 1, 1, 10000, false)
		p := c.plan(whole, budget)
		if p == nil || len(p.Moves) != 2 || p.Target != 0 {
			t.Fatalf("plan %+v, want both pods moved off n0", p)
		}
		c.check(p)
		if p := c.plan(whole, DefragBudget{MaxMoves: 1}); p != nil {
			t.Fatalf("a budget of one move: plan %+v, want none", p)
		}
	})
	t.Run("nowhere to go", func(t *testing.T) {
		// The moved pod would fit only on the node it leaves.
		c := newCluster(t, 2, 1)
		c.book("a", 0, 0, 8192, true)
		c.book("x", 1, 0, 9000, false)
		c.book("y", 0, 1, 100, false)
		if p := c.plan(whole, budget); p != nil {
			t.Fatalf("plan %+v, want none", p)
		}
	})
	t.Run("only movable pods move", func(t *testing.T) {
		c := newCluster(t, 1, 1)
		c.book("fixed", 0, 0, 1000, false)
		c.book("fixed2", 1, 0, 1000, false)
		if p := c.plan(whole, budget); p != nil {
			t.Fatalf("plan %+v, want none", p)
		}
	})
	t.Run("two GPUs for one pod", func(t *testing.T) {
		// The pod needs two whole GPUs; each of n0's holds a movable pod.
		c := newCluster(t, 2, 4)
		c.book("a", 0, 0, 3000, true)
		c.book("b", 0, 1, 3000, true)
		for g := range 4 {
			c.book(fmt.Sprintf("z%d", g), 1, g, 12000, false)
		}
		p := c.plan(makePod("w2").whole("c", 2).obj(), budget)
		if p == nil || len(p.Moves) != 2 || p.Target != 0 || len(p.Placement.Containers[0].GPUs) != 2 {
			t.Fatalf("plan %+v, want both pods moved to n1 and the pod on n0", p)
		}
		c.check(p)
	})
}

// Any plan on random clusters moves only movable pods, never to the node
// they leave, within budget, and over-commits nothing, in order.
func TestPlanDefragInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	plans := 0
	for round := range 40 {
		c := &cluster{t: t, pl: mustPlacer("fgd-robust"), states: randomCluster(r)}
		for k := range 60 {
			pod := randomPod(r, k)
			pod.Key = fmt.Sprintf("ns/r%d-p%d", round, k)
			d := c.pl.Pick(c.states, pod, 1)
			if d.Placement != nil {
				if err := c.states[d.Index].Apply(d.Placement); err != nil {
					t.Fatal(err)
				}
				if r.IntN(2) == 0 {
					c.movable = append(c.movable, Movable{Key: pod.Key, Node: d.Index, Request: pod, Placement: d.Placement})
				}
				continue
			}
			b := DefragBudget{MaxMoves: 1 + r.IntN(3), MaxTargets: r.IntN(3)}
			p := c.pl.PlanDefrag(c.states, pod, c.movable, b, 1)
			if p == nil {
				continue
			}
			plans++
			if len(p.Moves) > b.MaxMoves {
				t.Fatalf("plan of %d moves, budget %d", len(p.Moves), b.MaxMoves)
			}
			c.check(p)
		}
	}
	if plans < 20 {
		t.Fatalf("only %d plans checked", plans)
	}
}
