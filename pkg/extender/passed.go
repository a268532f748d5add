package extender

import (
	"container/list"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Bounds of what bind remembers of filter calls. kube-scheduler binds
// moments after the filter call, or after its PreBind plugins, which may
// wait for volumes up to 10 minutes (VolumeBinding's bindTimeoutSeconds).
// An entry is dropped when its pod binds, and a pod that passed no node
// has none, so entries build up only for pods between filter and bind.
const (
	passedTTL   = 15 * time.Minute
	passedPods  = 10000
	passedNames = 1 << 18
)

// passedNodes remembers, per pod UID, the nodes the latest filter call
// passed, so that bind can refuse the others. It holds at most maxPods
// pods and maxNames node names, dropping the oldest first, each for ttl.
// The zero value uses the bounds above.
type passedNodes struct {
	mu                sync.Mutex
	ttl               time.Duration
	maxPods, maxNames int
	order             *list.List // of *passedEntry, oldest first
	pods              map[types.UID]*list.Element
	names             int
}

type passedEntry struct {
	pod   types.UID
	at    time.Time
	nodes map[string]struct{}
}

func (p *passedNodes) initLocked() {
	if p.order != nil {
		return
	}
	p.order, p.pods = list.New(), map[types.UID]*list.Element{}
	if p.ttl <= 0 {
		p.ttl = passedTTL
	}
	if p.maxPods <= 0 {
		p.maxPods = passedPods
	}
	if p.maxNames <= 0 {
		p.maxNames = passedNames
	}
}

// put records that the latest filter call for pod passed nodes, in place
// of what an earlier one passed.
func (p *passedNodes) put(pod types.UID, nodes []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.initLocked()
	p.removeLocked(pod)
	if pod == "" || len(nodes) == 0 || len(nodes) > p.maxNames {
		return
	}
	e := &passedEntry{pod: pod, at: time.Now(), nodes: make(map[string]struct{}, len(nodes))}
	for _, n := range nodes {
		e.nodes[n] = struct{}{}
	}
	for p.order.Len() > 0 && (p.order.Len() >= p.maxPods || p.names+len(e.nodes) > p.maxNames ||
		time.Since(p.order.Front().Value.(*passedEntry).at) > p.ttl) {
		p.removeLocked(p.order.Front().Value.(*passedEntry).pod)
	}
	p.pods[pod] = p.order.PushBack(e)
	p.names += len(e.nodes)
}

// check reports whether the latest filter call for pod, if there was one
// within the ttl (known), passed node.
func (p *passedNodes) check(pod types.UID, node string) (passed, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.initLocked()
	el := p.pods[pod]
	if el == nil {
		return false, false
	}
	e := el.Value.(*passedEntry)
	if time.Since(e.at) > p.ttl {
		p.removeLocked(pod)
		return false, false
	}
	_, passed = e.nodes[node]
	return passed, true
}

// forget drops what is remembered of pod.
func (p *passedNodes) forget(pod types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.initLocked()
	p.removeLocked(pod)
}

func (p *passedNodes) removeLocked(pod types.UID) {
	if el := p.pods[pod]; el != nil {
		p.names -= len(el.Value.(*passedEntry).nodes)
		p.order.Remove(el)
		delete(p.pods, pod)
	}
}

// size is the number of pods remembered.
func (p *passedNodes) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.initLocked()
	return p.order.Len()
}
