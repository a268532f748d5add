package cache_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
)

const testModel = "NVIDIA A100-SXM4-40GB"

// logRecorder keeps what the cache logs, so tests can check that a bad
// record is reported.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) logger() klog.Logger {
	return funcr.New(func(prefix, args string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.lines = append(r.lines, prefix+" "+args)
	}, funcr.Options{})
}

// matching returns the logged lines that contain every one of subs.
func (r *logRecorder) matching(subs ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
next:
	for _, l := range r.lines {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

func (r *logRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

func newCache(t *testing.T) (*cache.Cache, *logRecorder) {
	t.Helper()
	r := &logRecorder{}
	return cache.New(r.logger(), cache.Options{}), r
}

// uuidOf is the UUID the test inventories give GPU i of a node.
func uuidOf(node string, i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }

// inventory returns a valid inventory with one GPU of each size in mib.
func inventory(node string, mode gpusharev1.Mode, mib ...int64) *gpusharev1.GPUInventory {
	inv := &gpusharev1.GPUInventory{Mode: mode}
	for i, m := range mib {
		inv.GPUs = append(inv.GPUs, gpusharev1.GPU{Index: i, UUID: uuidOf(node, i), Model: testModel,
			MemoryMiB: m, Healthy: true, NUMANode: -1})
	}
	return inv
}

// nodeWith returns a Node opted in to gpushare carrying value as its
// inventory annotation.
func nodeWith(name, value string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{gpusharev1.NodeLabel: "true", corev1.LabelHostname: name},
		Annotations: map[string]string{gpusharev1.InventoryAnnotation: value},
	}}
}

// gpuNode returns a gpushare Node in shared mode with one GPU per mib.
func gpuNode(t *testing.T, name string, mib ...int64) *corev1.Node {
	t.Helper()
	return inventoryNode(t, name, inventory(name, gpusharev1.ModeShared, mib...))
}

func inventoryNode(t *testing.T, name string, inv *gpusharev1.GPUInventory) *corev1.Node {
	t.Helper()
	value, err := gpusharev1.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	return nodeWith(name, value)
}

// share is one container's share of GPU gpu of node.
func share(node string, gpu int, mib, compute int64) gpusharev1.GPUShare {
	return gpusharev1.GPUShare{Index: gpu, UUID: uuidOf(node, gpu), MemoryMiB: mib, Compute: compute}
}

// appRecord returns an allocation on node with one app container per
// share list.
func appRecord(node string, containers ...[]gpusharev1.GPUShare) *gpusharev1.Allocation {
	a := &gpusharev1.Allocation{Node: node}
	for i, gpus := range containers {
		a.Containers = append(a.Containers, gpusharev1.ContainerAllocation{
			Name: fmt.Sprintf("c%d", i), Kind: gpusharev1.ContainerApp, GPUs: gpus})
	}
	return a
}

// podWith returns a running pod bound to node (if not empty) whose
// allocation annotation is value.
func podWith(uid, node, value string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   "default",
			Name:        "pod-" + uid,
			UID:         types.UID(uid),
			Annotations: map[string]string{gpusharev1.AllocationAnnotation: value},
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// recordedPod returns a running pod bound to a.Node carrying a as its
// allocation record.
func recordedPod(t *testing.T, uid string, a *gpusharev1.Allocation) *corev1.Pod {
	t.Helper()
	value, err := gpusharev1.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return podWith(uid, a.Node, value)
}

// appUsage is what an allocation of app containers books on each of gpus
// GPUs: app containers run together, so their shares add up.
func appUsage(gpus int, records ...*gpusharev1.Allocation) []alloc.Usage {
	out := make([]alloc.Usage, gpus)
	for _, a := range records {
		for _, c := range a.Containers {
			for _, g := range c.GPUs {
				out[g.Index].MemoryMiB += g.MemoryMiB
				out[g.Index].Compute += g.Compute
			}
		}
	}
	return out
}

// usage returns a copy of what the cache books on node's GPUs.
func usage(t *testing.T, c *cache.Cache, node string) []alloc.Usage {
	t.Helper()
	var out []alloc.Usage
	if err := c.Read(node, func(s *alloc.NodeState) {
		out = append([]alloc.Usage(nil), s.GPUs...)
	}); err != nil {
		t.Fatalf("Read(%s): %v", node, err)
	}
	return out
}

// placement returns an assumed placement of one app container on node's
// GPU gpu.
func placement(node string, gpu int, mib, compute int64) *alloc.Placement {
	u := alloc.Usage{MemoryMiB: mib, Compute: compute}
	a := alloc.Assignment{GPU: gpu, UUID: uuidOf(node, gpu), Usage: u}
	return &alloc.Placement{
		Node:       node,
		Containers: []alloc.ContainerPlacement{{Name: "c0", Kind: alloc.App, GPUs: []alloc.Assignment{a}}},
		Booked:     []alloc.Assignment{a},
	}
}

// sharedRequest is a pod of one app container asking mib on one GPU.
func sharedRequest(key, container string, mib int64) *alloc.PodRequest {
	return &alloc.PodRequest{Key: key, Containers: []alloc.PodContainer{{
		ContainerRequest: alloc.ContainerRequest{Name: container, MemoryMiB: mib}, Kind: alloc.App}}}
}

func mustPlacer(t *testing.T) *alloc.Placer {
	t.Helper()
	pl, err := alloc.NewPlacer(alloc.Config{Node: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}
