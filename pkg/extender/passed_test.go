package extender

import (
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestPassedNodesBounds: at most maxPods pods and maxNames names, the
// oldest dropped first; an empty pass forgets the pod.
func TestPassedNodesBounds(t *testing.T) {
	type check struct {
		pod, node     string
		passed, known bool
	}
	cases := map[string]struct {
		maxPods, maxNames int
		puts              [][]string // pod, then its nodes
		checks            []check
	}{
		"latest pass replaces the earlier": {puts: [][]string{{"a", "n1"}, {"a", "n2"}},
			checks: []check{{"a", "n1", false, true}, {"a", "n2", true, true}}},
		"empty pass forgets": {puts: [][]string{{"a", "n1"}, {"a"}},
			checks: []check{{"a", "n1", false, false}}},
		"pod count bound drops the oldest": {maxPods: 2, puts: [][]string{{"a", "n1"}, {"b", "n1"}, {"c", "n1"}},
			checks: []check{{"a", "n1", false, false}, {"b", "n1", true, true}, {"c", "n1", true, true}}},
		// a and b hold 2 + 2 names; c's 2 more exceed 5: a goes.
		"name bound drops the oldest": {maxNames: 5, puts: [][]string{{"a", "n1", "n2"}, {"b", "n1", "n2"}, {"c", "n1", "n2"}},
			checks: []check{{"a", "n1", false, false}, {"b", "n2", true, true}, {"c", "n1", true, true}}},
		"a pass larger than the name bound is not kept": {maxNames: 1, puts: [][]string{{"a", "n1", "n2"}},
			checks: []check{{"a", "n1", false, false}}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := &passedNodes{maxPods: c.maxPods, maxNames: c.maxNames}
			for _, put := range c.puts {
				p.put(types.UID(put[0]), put[1:])
			}
			for _, ch := range c.checks {
				passed, known := p.check(types.UID(ch.pod), ch.node)
				if passed != ch.passed || known != ch.known {
					t.Errorf("check(%s, %s) = %v, %v; want %v, %v", ch.pod, ch.node, passed, known, ch.passed, ch.known)
				}
			}
		})
	}
}

// TestPassedNodesExpire: a pass is forgotten passedTTL after it was
// made, and expired entries make room for new ones.
func TestPassedNodesExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &passedNodes{maxPods: 3}
		p.put("a", []string{"n1"})
		time.Sleep(passedTTL - time.Second)
		if passed, _ := p.check("a", "n1"); !passed {
			t.Fatal("forgotten before the ttl")
		}
		p.put("b", []string{"n1"})
		time.Sleep(2 * time.Second)
		if _, known := p.check("a", "n1"); known {
			t.Fatal("remembered after the ttl")
		}
		time.Sleep(passedTTL)
		p.put("c", []string{"n1"})
		if n := p.size(); n != 1 {
			t.Errorf("%d pods remembered, want 1 (b expired)", n)
		}
	})
}
