package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// fakeNode is a node in memory, as the apiserver and a watch of it would
// show it: PatchNode applies a merge patch of labels and annotations,
// bumps the resource version and tells the publisher, as the watch event
// of the write would; set does the same for another writer.
type fakeNode struct {
	mu      sync.Mutex
	node    *corev1.Node
	patches []time.Time
	// fail, while above zero, makes PatchNode fail and counts down.
	fail int
	// afterPatch, if set, runs after each successful patch.
	afterPatch func()
	pub        *Publisher
}

func newFakeNode() *fakeNode {
	return &fakeNode{node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", ResourceVersion: "1",
		Labels: map[string]string{"kubernetes.io/hostname": "gpu-0"}, Annotations: map[string]string{"example.com/keep": "me"}}}}
}

func (f *fakeNode) PatchNode(_ context.Context, name string, patch []byte) (*corev1.Node, error) {
	f.mu.Lock()
	if f.fail > 0 {
		f.fail--
		f.mu.Unlock()
		return nil, errors.New("the server is currently unable to handle the request")
	}
	var p struct {
		Metadata struct{ Labels, Annotations map[string]string } `json:"metadata"`
	}
	if name != f.node.Name {
		f.mu.Unlock()
		return nil, errors.New("nodes " + name + " not found")
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	f.patches = append(f.patches, time.Now())
	n := f.changeLocked(func(n *corev1.Node) {
		maps.Copy(n.Labels, p.Metadata.Labels)
		maps.Copy(n.Annotations, p.Metadata.Annotations)
	})
	after := f.afterPatch
	f.mu.Unlock()
	f.pub.NodeChanged()
	if after != nil {
		after()
	}
	return n, nil
}

// set changes the node as another writer would.
func (f *fakeNode) set(change func(*corev1.Node)) {
	f.mu.Lock()
	f.changeLocked(change)
	f.mu.Unlock()
	f.pub.NodeChanged()
}

func (f *fakeNode) changeLocked(change func(*corev1.Node)) *corev1.Node {
	n := f.node.DeepCopy()
	change(n)
	rv, _ := strconv.Atoi(n.ResourceVersion)
	n.ResourceVersion = strconv.Itoa(rv + 1)
	f.node = n
	return n.DeepCopy()
}

// current is the NodeSource: the node as the watch shows it.
func (f *fakeNode) current() *corev1.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.node.DeepCopy()
}

func (f *fakeNode) writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.patches)
}

// logLines collects the lines logged through a context's logger.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) context(ctx context.Context) context.Context {
	return klog.NewContext(ctx, funcr.New(func(_, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, args)
		l.mu.Unlock()
	}, funcr.Options{}))
}

func (l *logLines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

func (l *logLines) count(substring string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substring) {
			n++
		}
	}
	return n
}

func twoGPUs() *gpusharev1.GPUInventory {
	return &gpusharev1.GPUInventory{Mode: gpusharev1.ModeShared, GPUs: []gpusharev1.GPU{
		{Index: 0, UUID: "GPU-a", Model: "Tesla T4", MemoryMiB: 15360, Healthy: true, NVLinkPeers: []int{1}},
		{Index: 1, UUID: "GPU-b", Model: "Tesla T4", MemoryMiB: 15360, Healthy: true, NVLinkPeers: []int{0}},
	}}
}

func marshal(t *testing.T, inv *gpusharev1.GPUInventory) string {
	t.Helper()
	v, err := gpusharev1.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// start publishes twoGPUs on a fake node and runs the publisher until
// the test ends. Call it inside a synctest bubble.
func start(t *testing.T, log *logLines) (*fakeNode, *Publisher, context.Context) {
	t.Helper()
	f := newFakeNode()
	p := NewPublisher(f, "gpu-0", f.current)
	f.pub = p
	ctx, cancel := context.WithCancel(log.context(t.Context()))
	t.Cleanup(cancel)
	go p.Run(ctx)
	if err := p.Publish(ctx, twoGPUs()); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if w := f.writes(); w != 1 {
		t.Fatalf("publishing on a bare node took %d writes, want 1", w)
	}
	return f, p, ctx
}

// TestRestore: whatever someone else does to the node's label or
// inventory that the scheduler would read differently is put back at
// once (the first restore is not held back), in one write, with an Info
// line naming what differed; what the scheduler reads the same is left
// alone.
func TestRestore(t *testing.T) {
	extra := twoGPUs()
	extra.GPUs = append(extra.GPUs, gpusharev1.GPU{Index: 2, UUID: "GPU-c", Model: "Tesla T4", MemoryMiB: 15360, Healthy: true})
	unhealthy := twoGPUs()
	unhealthy.GPUs[1].Healthy = false
	for name, c := range map[string]struct {
		change func(*testing.T, *corev1.Node)
		// logged is what the restore's log line says, "" for no restore.
		logged []string
	}{
		"garbage inventory": {
			change: func(_ *testing.T, n *corev1.Node) { n.Annotations[gpusharev1.InventoryAnnotation] = "garbage" },
			logged: []string{`"inventory"="invalid"`, `"inventoryError"="gpushare.io/gpu-inventory: invalid character`},
		},
		"an extra GPU": {
			change: func(t *testing.T, n *corev1.Node) {
				n.Annotations[gpusharev1.InventoryAnnotation] = marshal(t, extra)
			},
			logged: []string{`"inventory"="different"`, `"gpus"=3`, `"publishedGPUs"=2`},
		},
		"a healthy GPU marked unhealthy": {
			change: func(t *testing.T, n *corev1.Node) {
				n.Annotations[gpusharev1.InventoryAnnotation] = marshal(t, unhealthy)
			},
			logged: []string{`"inventory"="different"`, `"gpus"=2`},
		},
		"the inventory removed": {
			change: func(_ *testing.T, n *corev1.Node) { delete(n.Annotations, gpusharev1.InventoryAnnotation) },
			logged: []string{`"inventory"="absent"`},
		},
		"the label removed": {
			change: func(_ *testing.T, n *corev1.Node) { delete(n.Labels, gpusharev1.NodeLabel) },
			logged: []string{`"label"="absent"`},
		},
		"the label set to false, and the inventory removed": {
			change: func(_ *testing.T, n *corev1.Node) {
				n.Labels[gpusharev1.NodeLabel] = "false"
				delete(n.Annotations, gpusharev1.InventoryAnnotation)
			},
			logged: []string{`"label"="other"`, `"labelValue"="false"`, `"inventory"="absent"`},
		},
		"the same inventory reformatted, with a field the scheduler ignores": {
			change: func(t *testing.T, n *corev1.Node) {
				var m map[string]any
				if err := json.Unmarshal([]byte(n.Annotations[gpusharev1.InventoryAnnotation]), &m); err != nil {
					t.Fatal(err)
				}
				m["comment"] = "added by a newer writer"
				delete(m, "mode") // Shared is the default
				b, err := json.MarshalIndent(m, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				n.Annotations[gpusharev1.InventoryAnnotation] = string(b)
			},
		},
		"another annotation and label changed": {
			change: func(_ *testing.T, n *corev1.Node) {
				n.Annotations[gpusharev1.UsageAnnotation] = "{}"
				n.Labels["team"] = "a"
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				log := &logLines{}
				f, _, _ := start(t, log)
				log.take()
				f.set(func(n *corev1.Node) { c.change(t, n) })
				synctest.Wait()
				lines := log.take()
				if c.logged == nil {
					if w := f.writes(); w != 1 || len(lines) != 0 {
						t.Errorf("%d writes, logged %q; want the node left alone", w-1, lines)
					}
					return
				}
				if w := f.writes(); w != 2 {
					t.Errorf("%d writes after the change, want 1", w-1)
				}
				n := f.current()
				if n.Labels[gpusharev1.NodeLabel] != "true" || n.Annotations[gpusharev1.InventoryAnnotation] != marshal(t, twoGPUs()) {
					t.Errorf("node after the restore: label %q, inventory %s", n.Labels[gpusharev1.NodeLabel], n.Annotations[gpusharev1.InventoryAnnotation])
				}
				if n.Annotations["example.com/keep"] != "me" || n.Labels["kubernetes.io/hostname"] != "gpu-0" {
					t.Errorf("the restore changed the node's other labels or annotations: %v %v", n.Labels, n.Annotations)
				}
				if len(lines) != 1 || !strings.Contains(lines[0], `"msg"="Node's GPU inventory was changed by someone else; restoring it"`) {
					t.Fatalf("logged %q; want one line saying the inventory is restored", lines)
				}
				for _, want := range c.logged {
					if !strings.Contains(lines[0], want) {
						t.Errorf("logged %s; want it to contain %s", lines[0], want)
					}
				}
			})
		})
	}
}

// TestRestoreRateLimited: another writer that puts its garbage back right
// after every restore gets restores at most once a second, then ever
// further apart: the interval doubles from 1 s at each restore that comes
// within twice the interval of the one before, up to 2 min. Over 10 min
// that is restores at 0, 1, 3, 7, 15, 31, 63, 127, 247, 367 and 487 s:
// 11 writes rather than one per round trip. Once the other writer has
// stopped for longer than twice the interval, a change is put back at
// once again.
func TestRestoreRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &logLines{}
		f, _, _ := start(t, log)
		garbage := func(n *corev1.Node) { n.Annotations[gpusharev1.InventoryAnnotation] = "garbage" }
		fighting := true
		var fightMu sync.Mutex
		f.afterPatch = func() {
			go func() {
				time.Sleep(10 * time.Millisecond)
				fightMu.Lock()
				defer fightMu.Unlock()
				if fighting {
					f.set(garbage)
				}
			}()
		}
		begin := time.Now()
		f.set(garbage)
		time.Sleep(10 * time.Minute)
		fightMu.Lock()
		fighting = false
		fightMu.Unlock()
		f.mu.Lock()
		f.afterPatch = nil
		f.mu.Unlock()

		f.mu.Lock()
		var at []time.Duration
		for _, p := range f.patches[1:] {
			at = append(at, p.Sub(begin))
		}
		f.mu.Unlock()
		var want []time.Duration
		for _, s := range []int{0, 1, 3, 7, 15, 31, 63, 127, 247, 367, 487} {
			want = append(want, time.Duration(s)*time.Second)
		}
		if diff := cmp.Diff(want, at); diff != "" {
			t.Errorf("restores while fighting another writer, since the fight began (-want,+got):\n%s", diff)
		}
		// Told once each time the interval grew: 2, 4, ... 64, 120 s.
		if n := log.count("Another writer keeps changing the node's GPU inventory; restoring it less often"); n != 7 {
			t.Errorf("logged the fight %d times, want 7", n)
		}
		if n := log.count("restoring it\""); n != len(at) {
			t.Errorf("logged %d restores, want one line for each of %d", n, len(at))
		}

		// The garbage put back after the restore at 487 s is restored
		// at 607 s, and left alone since; 5 min later (more than twice
		// 120 s), a change is put back at once.
		time.Sleep(5 * time.Minute)
		writes := f.writes()
		f.set(garbage)
		synctest.Wait()
		if f.writes() != writes+1 {
			t.Errorf("after 5 min of peace, a change was not put back at once")
		}
	})
}

// TestRestoreRetries: a restore that fails is tried again, backing off as
// restores do, until it succeeds.
func TestRestoreRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &logLines{}
		f, _, _ := start(t, log)
		f.mu.Lock()
		f.fail = 3
		f.mu.Unlock()
		begin := time.Now()
		f.set(func(n *corev1.Node) { delete(n.Labels, gpusharev1.NodeLabel) })
		// Tries at 0 s (fails), 1 s (fails, interval 2 s), 3 s (fails,
		// interval 4 s), 7 s (succeeds).
		time.Sleep(time.Minute)
		f.mu.Lock()
		at := f.patches[len(f.patches)-1].Sub(begin)
		f.mu.Unlock()
		if at != 7*time.Second || f.writes() != 2 {
			t.Errorf("restored after %v in %d writes; want after 7 s, in one write", at, f.writes()-1)
		}
		if n := log.count(`"msg"="Restoring the node's GPU inventory"`); n != 3 {
			t.Errorf("logged %d failed restores, want 3", n)
		}
		if n := log.count("Another writer"); n != 0 {
			t.Errorf("failed writes were logged as a fight with another writer %d times", n)
		}
	})
}

// TestStaleNodeIgnored: the watch may still show the node as it was
// before the publisher's own write; that node is not compared, and so
// not written again.
func TestStaleNodeIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeNode()
		var seen atomic.Pointer[corev1.Node]
		seen.Store(f.current()) // RV 1, neither label nor inventory
		p := NewPublisher(f, "gpu-0", seen.Load)
		f.pub = p
		ctx, cancel := context.WithCancel((&logLines{}).context(t.Context()))
		defer cancel()
		go p.Run(ctx)
		if err := p.Publish(ctx, twoGPUs()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		p.NodeChanged()
		synctest.Wait()
		if w := f.writes(); w != 1 {
			t.Errorf("%d writes; the node as it was before the first write was taken for a change", w)
		}
		// Once the watch shows the write, a change after it counts.
		seen.Store(f.current())
		f.set(func(n *corev1.Node) { delete(n.Labels, gpusharev1.NodeLabel) })
		seen.Store(f.current())
		p.NodeChanged()
		synctest.Wait()
		if w := f.writes(); w != 2 {
			t.Errorf("%d writes; want the removed label put back", w)
		}
	})
}

// TestPublishComparesWithNode: a restarted daemon finds its inventory on
// the node (written before, perhaps formatted otherwise) and writes
// nothing, and then restores it as its own; one that finds garbage there
// writes at once; a new inventory (a GPU failed) is written at once,
// however recent the last restore.
func TestPublishComparesWithNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &logLines{}
		ctx, cancel := context.WithCancel(log.context(t.Context()))
		f := newFakeNode()
		f.node.Labels[gpusharev1.NodeLabel] = "true"
		var indented bytes.Buffer
		if err := json.Indent(&indented, []byte(marshal(t, twoGPUs())), "", " "); err != nil {
			t.Fatal(err)
		}
		f.node.Annotations[gpusharev1.InventoryAnnotation] = indented.String()
		p := NewPublisher(f, "gpu-0", f.current)
		f.pub = p
		if err := p.Publish(ctx, twoGPUs()); err != nil {
			t.Fatal(err)
		}
		if w := f.writes(); w != 0 {
			t.Errorf("%d writes; the node already held the inventory", w)
		}
		go p.Run(ctx)
		f.set(func(n *corev1.Node) { delete(n.Labels, gpusharev1.NodeLabel) })
		synctest.Wait()
		if w, n := f.writes(), log.count("Node's GPU inventory was changed by someone else; restoring it"); w != 1 || n != 1 {
			t.Errorf("%d writes, %d lines saying so; want the label restored as the publisher's own", w, n)
		}
		cancel()

		ctx = log.context(t.Context())
		f.set(func(n *corev1.Node) { n.Annotations[gpusharev1.InventoryAnnotation] = "garbage" })
		p = NewPublisher(f, "gpu-0", f.current)
		f.pub = p
		if err := p.Publish(ctx, twoGPUs()); err != nil {
			t.Fatal(err)
		}
		if w := f.writes(); w != 2 {
			t.Errorf("%d writes; want the garbage replaced at once", w-1)
		}
		go p.Run(ctx)
		f.set(func(n *corev1.Node) { delete(n.Labels, gpusharev1.NodeLabel) })
		synctest.Wait()
		failed := twoGPUs()
		failed.GPUs[0].Healthy = false
		if err := p.Publish(ctx, failed); err != nil {
			t.Fatal(err)
		}
		if w := f.writes(); w != 4 {
			t.Errorf("%d writes; want a restore and the failed GPU written at once", w-2)
		}
		if got := f.current().Annotations[gpusharev1.InventoryAnnotation]; got != marshal(t, failed) {
			t.Errorf("inventory %s, want the failed GPU's", got)
		}
	})
}
