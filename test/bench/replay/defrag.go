package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/defrag"
)

// evictionRBAC is what the chart adds to gpushare-scheduler's role with
// gpushare.defrag.enabled: creating evictions.
const evictionRBAC = `
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: gpushare-scheduler-defrag
rules:
- apiGroups: [""]
  resources: ["pods/eviction"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: gpushare-scheduler-defrag
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: gpushare-scheduler-defrag
subjects:
- kind: ServiceAccount
  name: gpushare-scheduler
  namespace: kube-system
`

// mover plays, for the replay's movable pods, the ReplicaSet that owns
// each: a movable pod (a share of the GPU pods, drawn per pod from the
// seed) carries the opt-in label and a controller reference; when the
// scheduler evicts it, the mover creates its replacement, under a new
// name, and follows its decision. kube-controller-manager runs without
// its garbage collector, which would delete pods whose owner does not
// exist.
type mover struct {
	client kubernetes.Interface
	d      *decisions
	rng    *rand.Rand
	share  float64

	mu sync.Mutex
	// movable holds the bound movable pods by name, as created.
	movable map[string]*corev1.Pod
	// ours holds the pods the replay deletes itself.
	ours map[string]bool
	// milli is each movable pod's GPU milli.
	milli   map[string]int64
	moved   int
	pending int
	// lost is the GPU milli of replacements turned away.
	lost int64
	next int
}

func newMover(client kubernetes.Interface, d *decisions, seed uint64, share float64) *mover {
	return &mover{client: client, d: d, rng: rand.New(rand.NewPCG(seed, seed^0xdef7a6)), share: share,
		movable: map[string]*corev1.Pod{}, ours: map[string]bool{}, milli: map[string]int64{}}
}

// mark makes pod (asking GPUs) movable with the configured chance.
func (m *mover) mark(pod *corev1.Pod, milli int64) {
	if m.rng.Float64() >= m.share {
		return
	}
	pod.Labels[defrag.OptIn] = "true"
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + pod.Name,
		UID: types.UID("rs-" + pod.Name), Controller: new(true)}}
	m.mu.Lock()
	m.movable[pod.Name] = pod.DeepCopy()
	m.milli[pod.Name] = milli
	m.mu.Unlock()
}

// deleting notes that the replay deletes pod name itself.
func (m *mover) deleting(name string) {
	m.mu.Lock()
	m.ours[name] = true
	m.mu.Unlock()
}

// gone is the informer's delete handler: an evicted movable pod is
// replaced.
func (m *mover) gone(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	m.mu.Lock()
	tmpl, movable := m.movable[p.Name]
	if m.ours[p.Name] || !movable || p.Spec.NodeName == "" {
		delete(m.ours, p.Name)
		m.mu.Unlock()
		return
	}
	delete(m.movable, p.Name)
	milli := m.milli[p.Name]
	delete(m.milli, p.Name)
	m.next++
	name := fmt.Sprintf("%s-mv%d", strings.SplitN(p.Name, "-mv", 2)[0], m.next)
	m.moved++
	m.pending++
	m.mu.Unlock()
	repl := tmpl.DeepCopy()
	repl.Name, repl.ResourceVersion, repl.UID = name, "", ""
	go m.replace(repl, milli)
}

// replace creates a moved pod's replacement and waits for its decision.
func (m *mover) replace(pod *corev1.Pod, milli int64) {
	ctx := context.Background()
	ch := m.d.expect(pod.Name, true)
	_, err := m.client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	var got outcome
	if err == nil {
		select {
		case got = <-ch:
		case <-time.After(2 * time.Minute):
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending--
	if got.node != "" {
		m.movable[pod.Name] = pod
		m.milli[pod.Name] = milli
		return
	}
	m.lost += milli
	progress("the replacement %s of a moved pod was not placed (%v %s)", pod.Name, err, got.reason)
	m.ours[pod.Name] = true
	go func() {
		_ = m.client.CoreV1().Pods(namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}()
}

// settle waits until every replacement is decided, and returns the pods
// moved and the GPU milli of replacements turned away.
func (m *mover) settle(ctx context.Context) (moved int, lost int64) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		m.mu.Lock()
		pending, moved, lost := m.pending, m.moved, m.lost
		m.mu.Unlock()
		if pending == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return moved, lost
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// planned reports whether a turned-away pod's reason says a plan makes
// room for it.
func planned(reason string) bool {
	return strings.Contains(reason, "defragmentation: moving") || strings.Contains(reason, "defragmentation: waiting for")
}

// awaitMoves waits for a pod that a plan makes room for to be decided
// again: bound, or turned away for good (its plan given up). A minute
// and a half passes at most (the plan's timeout is a minute).
func awaitMoves(ctx context.Context, client kubernetes.Interface, d *decisions, name string) (outcome, error) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		ch := d.expect(name, true)
		cur, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return outcome{}, err
		}
		if err == nil {
			// The pod as it is now: the informer may have delivered it
			// before this wait began.
			d.seen(cur)
		}
		var got outcome
		select {
		case got = <-ch:
		case <-time.After(time.Until(deadline)):
			d.forget(name)
			return outcome{reason: "the moves did not make room in time"}, nil
		case <-ctx.Done():
			return outcome{}, ctx.Err()
		}
		if got.node != "" || !planned(got.reason) {
			return got, nil
		}
		// Still waiting for its moves: wait for the next change.
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return outcome{}, ctx.Err()
		}
		if time.Now().After(deadline) {
			return outcome{reason: "the moves did not make room in time"}, nil
		}
	}
}
