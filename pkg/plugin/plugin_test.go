package plugin_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/plugin"
)

const testModel = "NVIDIA A100-SXM4-40GB"

func TestMain(m *testing.M) {
	// The framework runtime records into kube-scheduler's metrics, which
	// kube-scheduler registers at start.
	metrics.Register()
	os.Exit(m.Run())
}

// gpuNode returns a gpushare Node in shared mode with one GPU per mib,
// its inventory in the annotation gpushare-node writes.
func gpuNode(t testing.TB, name string, mib ...int64) *corev1.Node {
	t.Helper()
	inv := &gpusharev1.GPUInventory{Mode: gpusharev1.ModeShared}
	for i, m := range mib {
		inv.GPUs = append(inv.GPUs, gpusharev1.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: testModel,
			MemoryMiB: m, Healthy: true, NUMANode: -1})
	}
	value, err := gpusharev1.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{gpusharev1.NodeLabel: "true", corev1.LabelHostname: name},
		Annotations: map[string]string{gpusharev1.InventoryAnnotation: value},
	}}
}

// gpuPod returns a pending pod of scheduler asking mib of GPU memory
// (none if 0).
func gpuPod(name, scheduler string, mib int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if mib > 0 {
		l := corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(mib, k8sresource.DecimalSI)}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}
	}
	return p
}

// cluster is a fake clientset and informers holding nodes, the frameworks
// of the profiles built over them, the bindings made and the collectors
// registered.
type cluster struct {
	t        testing.TB
	ctx      context.Context
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	snapshot *schedcache.Snapshot
	nodes    []*corev1.Node
	shared   *plugin.Shared

	mu         sync.Mutex
	bound      map[string]*corev1.Binding
	registered int
	// plugins holds the plugin of each profile built.
	plugins map[string]*plugin.GPUShare
	// args, if set, are the GPUShareArgs every profile's plugin gets.
	args []byte
}

// newCluster returns a cluster holding n1 (one 16 GiB GPU), n2 (8 GiB)
// and n3 (24 GiB), with one Shared for every profile.
func newCluster(t testing.TB) *cluster {
	t.Helper()
	return newClusterOf(t, []*corev1.Node{gpuNode(t, "n1", 16384), gpuNode(t, "n2", 8192), gpuNode(t, "n3", 24576)})
}

// newClusterOf returns a cluster holding nodes and pods, with one Shared
// for every profile.
func newClusterOf(t testing.TB, nodes []*corev1.Node, pods ...*corev1.Pod) *cluster {
	t.Helper()
	objs := make([]runtime.Object, 0, len(nodes)+len(pods))
	for _, n := range nodes {
		objs = append(objs, n)
	}
	for _, p := range pods {
		objs = append(objs, p)
	}
	c := &cluster{t: t, ctx: t.Context(), client: fake.NewClientset(objs...), nodes: nodes,
		snapshot: schedcache.NewSnapshot(pods, nodes), bound: map[string]*corev1.Binding{}}
	c.factory = informers.NewSharedInformerFactory(c.client, 0)
	c.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.bound[b.Name] = b
		return true, b, nil
	})
	c.shared = plugin.NewShared(func(cs ...prometheus.Collector) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.registered += len(cs)
	})
	return c
}

// profile builds the framework of a profile that runs GPUShare at every
// extension point it implements.
func (c *cluster) profile(name string, opts ...frameworkruntime.Option) framework.Framework {
	c.t.Helper()
	factory := func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		if c.args != nil {
			obj = &runtime.Unknown{Raw: c.args}
		}
		p, err := plugin.New(c.shared)(ctx, obj, h)
		if pl, ok := p.(*plugin.GPUShare); ok {
			c.mu.Lock()
			if c.plugins == nil {
				c.plugins = map[string]*plugin.GPUShare{}
			}
			c.plugins[name] = pl
			c.mu.Unlock()
		}
		return p, err
	}
	fw, err := tf.NewFramework(c.ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterPluginAsExtensions(plugin.Name, factory,
			"PreFilter", "Filter", "PostFilter", "PreScore", "Score", "Reserve", "Bind", "PostBind"),
	}, name,
		append([]frameworkruntime.Option{
			frameworkruntime.WithClientSet(c.client),
			frameworkruntime.WithInformerFactory(c.factory),
			frameworkruntime.WithSnapshotSharedLister(c.snapshot),
			frameworkruntime.WithMutableSnapshotLister(c.snapshot),
			frameworkruntime.WithEventRecorder(events.NewFakeRecorder(100)),
		}, opts...)...,
	)
	if err != nil {
		c.t.Fatal(err)
	}
	return fw
}

// start starts the informers once every profile is built, as
// kube-scheduler does.
func (c *cluster) start() {
	c.factory.Start(c.ctx.Done())
	c.factory.WaitForCacheSync(c.ctx.Done())
	c.t.Cleanup(c.factory.Shutdown)
}

func (c *cluster) nodeInfo(name string) fwk.NodeInfo {
	c.t.Helper()
	ni, err := c.snapshot.NodeInfos().Get(name)
	if err != nil {
		c.t.Fatal(err)
	}
	return ni
}

// filter runs PreFilter and then Filter on every node, and returns the
// cycle state and each node's status (nil: it fits).
func (c *cluster) filter(fw framework.Framework, pod *corev1.Pod) (fwk.CycleState, map[string]*fwk.Status) {
	c.t.Helper()
	state := framework.NewCycleState()
	if _, s, _ := fw.RunPreFilterPlugins(c.ctx, state, pod); !s.IsSuccess() {
		c.t.Fatalf("PreFilter: %v", s)
	}
	out := map[string]*fwk.Status{}
	for _, n := range c.nodes {
		if s := fw.RunFilterPlugins(c.ctx, state, pod, c.nodeInfo(n.Name)); !s.IsSuccess() {
			out[n.Name] = s
		} else {
			out[n.Name] = nil
		}
	}
	return state, out
}

// score runs PreScore and Score on nodes and returns each node's total.
func (c *cluster) score(fw framework.Framework, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) map[string]int64 {
	c.t.Helper()
	if s := fw.RunPreScorePlugins(c.ctx, state, pod, nodes); !s.IsSuccess() {
		c.t.Fatalf("PreScore: %v", s)
	}
	scores, s := fw.RunScorePlugins(c.ctx, state, pod, nodes)
	if !s.IsSuccess() {
		c.t.Fatalf("Score: %v", s)
	}
	got := map[string]int64{}
	for _, ns := range scores {
		got[ns.Name] = ns.TotalScore
	}
	return got
}

// feasible returns the nodes the statuses pass.
func feasible(statuses map[string]*fwk.Status) []string {
	var out []string
	for _, n := range []string{"n1", "n2", "n3"} {
		if s, ok := statuses[n]; ok && s == nil {
			out = append(out, n)
		}
	}
	return out
}

// TestPluginCycle: through the framework, a GPU pod passes the nodes
// whose GPUs hold it, is turned away from the others with the core's
// reason, the node policy's best node gets the top score, Reserve books
// the GPUs (another pod no longer fits there), Unreserve frees them, and
// Bind binds the pod with its allocation record.
func TestPluginCycle(t *testing.T) {
	c := newCluster(t)
	fw := c.profile("default-scheduler")
	c.start()

	pod := gpuPod("big", "default-scheduler", 12000)
	state, statuses := c.filter(fw, pod)
	if got := feasible(statuses); strings.Join(got, ",") != "n1,n3" {
		t.Fatalf("Filter passed %v, want n1 and n3", got)
	}
	// n2's GPUs are too small whatever runs there: preemption would try
	// it in vain.
	if s := statuses["n2"]; s.Code() != fwk.UnschedulableAndUnresolvable || s.Message() != string(alloc.ReasonGPUTooSmall) {
		t.Errorf("Filter on n2: %v, want UnschedulableAndUnresolvable with %s", s, alloc.ReasonGPUTooSmall)
	}

	nodes := []fwk.NodeInfo{c.nodeInfo("n1"), c.nodeInfo("n3")}
	got := c.score(fw, state, pod, nodes)
	// binpack: the 16 GiB GPU is left fuller than the 24 GiB one.
	if got["n1"] != fwk.MaxScore || got["n3"] != 0 {
		t.Errorf("scores %v, want n1 %d and n3 0", got, fwk.MaxScore)
	}

	if s := fw.RunReservePluginsReserve(c.ctx, state, pod, "n1"); !s.IsSuccess() {
		t.Fatalf("Reserve: %v", s)
	}
	_, statuses = c.filter(fw, gpuPod("second", "default-scheduler", 12000))
	if got := feasible(statuses); strings.Join(got, ",") != "n3" {
		t.Errorf("after Reserve on n1, a second pod passed %v, want n3 alone", got)
	}
	fw.RunReservePluginsUnreserve(c.ctx, state, pod, "n1")
	_, statuses = c.filter(fw, gpuPod("second", "default-scheduler", 12000))
	if got := feasible(statuses); strings.Join(got, ",") != "n1,n3" {
		t.Errorf("after Unreserve, a second pod passed %v, want n1 and n3", got)
	}

	if s := fw.RunReservePluginsReserve(c.ctx, state, pod, "n1"); !s.IsSuccess() {
		t.Fatalf("Reserve: %v", s)
	}
	if s := fw.RunBindPlugins(c.ctx, state, pod, "n1"); !s.IsSuccess() {
		t.Fatalf("Bind: %v", s)
	}
	c.mu.Lock()
	b := c.bound["big"]
	c.mu.Unlock()
	if b == nil || b.Target.Name != "n1" || b.UID != pod.UID {
		t.Fatalf("binding %v, want pod big (its UID) onto n1", b)
	}
	a, err := gpusharev1.ParseAllocation(b.Annotations[gpusharev1.AllocationAnnotation])
	if err != nil || a.Node != "n1" || len(a.Containers) != 1 || len(a.Containers[0].GPUs) != 1 || a.Containers[0].GPUs[0].MemoryMiB != 12000 {
		t.Errorf("the Binding's record %+v (%v), want 12000 MiB of n1's GPU", a, err)
	}
}

// TestPluginSkipsPodsWithoutGPUs: a pod that asks for no GPU is left to
// kube-scheduler's own plugins: PreFilter skips GPUShare, Reserve books
// nothing and Bind leaves the pod to another bind plugin.
func TestPluginSkipsPodsWithoutGPUs(t *testing.T) {
	c := newCluster(t)
	fw := c.profile("default-scheduler")
	c.start()

	pod := gpuPod("plain", "default-scheduler", 0)
	state := framework.NewCycleState()
	if _, s, _ := fw.RunPreFilterPlugins(c.ctx, state, pod); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	if !state.GetSkipFilterPlugins().Has(plugin.Name) {
		t.Errorf("PreFilter did not skip %s for a pod without GPUs", plugin.Name)
	}
	for _, n := range c.nodes {
		if s := fw.RunFilterPlugins(c.ctx, state, pod, c.nodeInfo(n.Name)); !s.IsSuccess() {
			t.Errorf("Filter on %s: %v", n.Name, s)
		}
	}
	if s := fw.RunReservePluginsReserve(c.ctx, state, pod, "n2"); !s.IsSuccess() {
		t.Fatalf("Reserve: %v", s)
	}
	if s := fw.RunBindPlugins(c.ctx, state, pod, "n2"); !s.IsSkip() {
		t.Errorf("Bind: %v, want Skip", s)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bound) != 0 {
		t.Errorf("GPUShare bound a pod without GPUs: %v", c.bound)
	}
}

// TestPluginRanksPodsWithoutGPUs: under the fragmentation-aware default a
// pod that asks for CPU and no GPU passes every node (NodeResourcesFit
// judges CPU), goes first to a node without gpushare GPUs, and among GPU
// nodes to the one its CPU strands no GPU on; Reserve and Bind leave it
// alone.
func TestPluginRanksPodsWithoutGPUs(t *testing.T) {
	withCPU := func(n *corev1.Node, cores string) *corev1.Node {
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse(cores)}
		return n
	}
	plainNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-only", Labels: map[string]string{corev1.LabelHostname: "cpu-only"}}}
	c := newClusterOf(t, []*corev1.Node{withCPU(gpuNode(t, "n1", 16384), "16"), withCPU(gpuNode(t, "n2", 16384), "64"), withCPU(plainNode, "64")})
	fw := c.profile("default-scheduler")
	c.start()
	cpuPod := func(p *corev1.Pod, cores string) *corev1.Pod {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse(cores)}
		return p
	}
	// The workload learned: GPU pods of 8 CPUs each, bound.
	for i := range 20 {
		state, p := framework.NewCycleState(), cpuPod(gpuPod(fmt.Sprintf("g%d", i), "default-scheduler", 4096), "8")
		if _, s, _ := fw.RunPreFilterPlugins(c.ctx, state, p); !s.IsSuccess() {
			t.Fatalf("PreFilter: %v", s)
		}
		fw.RunPostBindPlugins(c.ctx, state, p, "n2")
	}

	pod := cpuPod(gpuPod("plain", "default-scheduler", 0), "12")
	state, statuses := c.filter(fw, pod)
	var nodes []fwk.NodeInfo
	for _, n := range c.nodes {
		if statuses[n.Name] != nil {
			t.Errorf("Filter on %s: %v, want it passed", n.Name, statuses[n.Name])
		}
		nodes = append(nodes, c.nodeInfo(n.Name))
	}
	got := c.score(fw, state, pod, nodes)
	// 12 of n1's 16 CPUs would leave none for an 8-CPU GPU pod: its GPU
	// would be stranded. n2 keeps 52.
	if got["cpu-only"] != fwk.MaxScore || got["n2"] <= got["n1"] {
		t.Errorf("scores %v, want cpu-only the best, then n2 above n1", got)
	}
	if s := fw.RunReservePluginsReserve(c.ctx, state, pod, "n2"); !s.IsSuccess() {
		t.Fatalf("Reserve: %v", s)
	}
	if s := fw.RunBindPlugins(c.ctx, state, pod, "n2"); !s.IsSkip() {
		t.Errorf("Bind: %v, want Skip (DefaultBinder binds pods without GPUs)", s)
	}
}

// TestPluginLearnsPodsWithoutGPUs: a pod without GPUs bound to a node
// with gpushare GPUs counts in the learned mix by its CPU (the CPU
// tie-break's switch weighs it); one bound to a node without them does
// not, nor does it count as a GPU pod.
func TestPluginLearnsPodsWithoutGPUs(t *testing.T) {
	withCPU := func(n *corev1.Node, cores string) *corev1.Node {
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse(cores)}
		return n
	}
	plainNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-only", Labels: map[string]string{corev1.LabelHostname: "cpu-only"}}}
	c := newClusterOf(t, []*corev1.Node{withCPU(gpuNode(t, "n1", 16384), "64"), withCPU(plainNode, "64")})
	fw := c.profile("default-scheduler")
	c.start()
	bind := func(name, cores, node string) {
		p := gpuPod(name, "default-scheduler", 0)
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse(cores)}
		state, _ := c.filter(fw, p)
		fw.RunPostBindPlugins(c.ctx, state, p, node)
	}
	pl := c.plugins["default-scheduler"]
	withoutGPUs := func() (cpu, weight int64) {
		mix := pl.LearnedMix()
		if last := mix[len(mix)-1]; last.Count == 0 {
			return last.CPUMilli, last.Weight
		}
		return 0, 0
	}
	bind("on-gpus", "12", "n1")
	cpu, weight := withoutGPUs()
	if cpu != 12_000 || weight == 0 {
		t.Fatalf("after a pod of 12 CPUs bound to n1: pods without GPUs %d milli-CPU, weight %d; want 12000 and some weight", cpu, weight)
	}
	bind("elsewhere", "2", "cpu-only")
	if c2, w2 := withoutGPUs(); c2 != cpu || w2 != weight {
		t.Errorf("after a pod bound to a node without gpushare GPUs: %d milli-CPU, weight %d; want it not counted (%d, %d)", c2, w2, cpu, weight)
	}
	if n := pl.LearnedGPUPods(); n != 0 {
		t.Errorf("%d GPU pods learned, want 0", n)
	}
}

// TestPluginRejects: a request no GPU could hold, and a malformed one, are
// rejected at PreFilter for good with the resource model's message; one
// no node has room for now gets the numbers of the shortfall.
func TestPluginRejects(t *testing.T) {
	c := newCluster(t)
	fw := c.profile("default-scheduler")
	c.start()

	t.Run("fits no GPU", func(t *testing.T) {
		// The largest GPU holds 24576 MiB.
		pod := gpuPod("huge", "default-scheduler", 30000)
		_, s, _ := fw.RunPreFilterPlugins(c.ctx, framework.NewCycleState(), pod)
		if s.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(s.Message(), "30000 MiB per GPU is more than the largest GPU holds (24576 MiB)") {
			t.Errorf("PreFilter: %v, want a rejection that names the largest GPU", s)
		}
	})
	t.Run("no node has room", func(t *testing.T) {
		// 20000 MiB fits n3's GPU alone; with n3 full, no node.
		full := gpuPod("full", "default-scheduler", 24576)
		state, _ := c.filter(fw, full)
		if s := fw.RunReservePluginsReserve(c.ctx, state, full, "n3"); !s.IsSuccess() {
			t.Fatalf("Reserve: %v", s)
		}
		defer fw.RunReservePluginsUnreserve(c.ctx, state, full, "n3")
		pod := gpuPod("wide", "default-scheduler", 20000)
		state, statuses := c.filter(fw, pod)
		if got := feasible(statuses); len(got) != 0 {
			t.Fatalf("Filter passed %v", got)
		}
		_, s := fw.RunPostFilterPlugins(c.ctx, state, pod, nil)
		if s.Code() != fwk.Unschedulable || s.Message() != "gpushare: largest free share on any GPU is 16384 MiB, pod needs 20000 MiB" {
			t.Errorf("PostFilter: %v, want the numbers of the shortfall", s)
		}
		// Its GPU demand waits, as keeping idle GPUs spare weighs it:
		// 20000 MiB is more than the mean GPU (16384 MiB) holds, a
		// whole GPU's worth.
		if got := c.plugins["default-scheduler"].Waiting(); got != 1000 {
			t.Errorf("waiting GPU demand %d after PostFilter, want 1000 (the pod's)", got)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		pod := gpuPod("bad", "default-scheduler", 0)
		pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-core": *k8sresource.NewQuantity(150, k8sresource.DecimalSI)}
		_, s, _ := fw.RunPreFilterPlugins(c.ctx, framework.NewCycleState(), pod)
		if s.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(s.Message(), "gpushare.io/gpu-core: 150 is above 100") {
			t.Errorf("PreFilter: %v, want UnschedulableAndUnresolvable with the model's message", s)
		}
	})
}

// TestPluginProfilesShareOneCache: the plugins of two profiles built from
// one Shared book in one cache, so a pod reserved under one profile takes
// GPUs the other sees taken; the metrics are registered once.
func TestPluginProfilesShareOneCache(t *testing.T) {
	c := newCluster(t)
	first := c.profile("default-scheduler")
	second := c.profile("gpu-scheduler")
	c.start()

	a := gpuPod("a", "default-scheduler", 20000)
	state, _ := c.filter(first, a)
	if s := first.RunReservePluginsReserve(c.ctx, state, a, "n3"); !s.IsSuccess() {
		t.Fatalf("Reserve under the first profile: %v", s)
	}
	b := gpuPod("b", "gpu-scheduler", 20000)
	_, statuses := c.filter(second, b)
	if got := feasible(statuses); len(got) != 0 {
		t.Errorf("the second profile passed %v for 20000 MiB while the first holds n3", got)
	}
	first.RunReservePluginsUnreserve(c.ctx, state, a, "n3")
	_, statuses = c.filter(second, b)
	if got := feasible(statuses); strings.Join(got, ",") != "n3" {
		t.Errorf("after Unreserve the second profile passed %v, want n3", got)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.registered != 9 {
		t.Errorf("%d collectors registered, want 9 (the cache's, the two of the decisions, the learned workload's, the idle GPUs kept, the three of defragmentation and the demand waiting), once", c.registered)
	}
}

// modelNode returns a gpushare Node of count GPUs of a model, each of
// mib.
func modelNode(t *testing.T, name, model string, count int, mib int64) *corev1.Node {
	t.Helper()
	n := gpuNode(t, name)
	inv := &gpusharev1.GPUInventory{Mode: gpusharev1.ModeShared}
	for i := range count {
		inv.GPUs = append(inv.GPUs, gpusharev1.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: model,
			MemoryMiB: mib, Healthy: true, NUMANode: -1})
	}
	value, err := gpusharev1.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[gpusharev1.InventoryAnnotation] = value
	return n
}

// TestPluginWeighsGPUSupply: the policy weighs model-bound pods against
// the GPUs per model its cache counts. Two P100 GPUs (the first 60% free)
// and 64 G2 GPUs; a learned workload of which 9% of the GPU demand asks
// for a P100. A 60% pod any GPU takes ranks a G2 node first: it
// would fill the P100's hole if the policy did not weigh the supply
// (pkg/alloc's TestSupplyKeepsFreePodsOffScarceGPUs shows the premise).
func TestPluginWeighsGPUSupply(t *testing.T) {
	const mib, hole = 16384, 9830 // 60% of a GPU
	nodes := []*corev1.Node{modelNode(t, "p100", "P100", 2, mib)}
	for i := range 8 {
		nodes = append(nodes, modelNode(t, fmt.Sprintf("g2-%d", i), "G2", 8, mib))
	}
	c := newClusterOf(t, nodes, runningPod(t, "held", "p100", 0, mib-hole, 0, time.Now()))
	fw := c.profile("default-scheduler")
	c.start()
	learn := func(name string, mib int64, models string) {
		p := gpuPod(name, "default-scheduler", mib)
		if models != "" {
			p.Annotations = map[string]string{"gpushare.io/gpu-models": models}
		}
		// A pod counts in the learned workload once it is bound.
		state := framework.NewCycleState()
		if _, s, _ := fw.RunPreFilterPlugins(c.ctx, state, p); !s.IsSuccess() {
			t.Fatalf("PreFilter %s: %v", name, s)
		}
		fw.RunPostBindPlugins(c.ctx, state, p, "g2-0")
	}
	// With the prior (100 whole GPUs) P100 pods are 40 of 300, 9% of
	// the GPU demand, for 3% of the GPUs.
	for i := range 20 {
		for k := range 5 {
			learn(fmt.Sprintf("whole-%d-%d", i, k), mib, "")
		}
		for k := range 3 {
			learn(fmt.Sprintf("any-%d-%d", i, k), hole, "")
		}
		for k := range 2 {
			learn(fmt.Sprintf("p100-%d-%d", i, k), hole, "P100")
		}
	}

	pod := gpuPod("free", "default-scheduler", hole)
	state, statuses := c.filter(fw, pod)
	var infos []fwk.NodeInfo
	for _, n := range nodes {
		if statuses[n.Name] != nil {
			t.Fatalf("Filter on %s: %v, want it feasible", n.Name, statuses[n.Name])
		}
		infos = append(infos, c.nodeInfo(n.Name))
	}
	got := c.score(fw, state, pod, infos)
	best := ""
	for name, s := range got {
		if s == fwk.MaxScore {
			best = name
		}
	}
	if !strings.HasPrefix(best, "g2-") {
		t.Errorf("scores %v: want a G2 node first", got)
	}
}

// TestPluginKubeletCapacity: a node whose kubelet advertises a managed
// resource (a device plugin serves it there) takes no pod that needs more
// of it than is free there, counted as the kubelet counts it: here
// gpushare-node counts gpushare.io/gpu-mem in GiB-sized devices while the
// scheduler reads MiB, the mismatch that made a real kubelet refuse pods
// in a loop. A node that does not advertise the resource is gpushare's
// alone to count.
func TestPluginKubeletCapacity(t *testing.T) {
	n1, n3 := gpuNode(t, "n1", 16384), gpuNode(t, "n3", 24576)
	n1.Status.Allocatable = corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(16, k8sresource.DecimalSI)}
	running := gpuPod("running", "default-scheduler", 10)
	running.Spec.NodeName = "n1"
	c := newClusterOf(t, []*corev1.Node{n1, n3}, running)
	c.nodes = []*corev1.Node{n1, n3}
	fw := c.profile("default-scheduler")
	c.start()

	state, statuses := c.filter(fw, gpuPod("mib", "default-scheduler", 8192))
	s := statuses["n1"]
	if s == nil || s.Code() != fwk.Unschedulable ||
		!strings.Contains(s.Message(), "node's kubelet has 6 of 16 gpushare.io/gpu-mem free, pod needs 8192") {
		t.Errorf("n1: %v; want Unschedulable with the kubelet's count", s)
	}
	// A copy of the state (preemption's dry runs, nominated pods) checks
	// the kubelet's count too.
	if s := fw.RunFilterPlugins(c.ctx, state.Clone(), gpuPod("mib", "default-scheduler", 8192), c.nodeInfo("n1")); s.IsSuccess() {
		t.Errorf("n1 through a copy of the cycle state: %v; want Unschedulable with the kubelet's count", s)
	}
	if statuses["n3"] != nil {
		t.Errorf("n3, which advertises no gpushare.io/gpu-mem: %v; want it to fit", statuses["n3"])
	}
	// Within what n1's kubelet has free, the pod passes.
	_, statuses = c.filter(fw, gpuPod("few", "default-scheduler", 6))
	if statuses["n1"] != nil {
		t.Errorf("a pod asking 6 on n1 with 6 free: %v; want it to fit", statuses["n1"])
	}

	// The pod turned away is retried when a kubelet advertises more of
	// what it asks (a device plugin registered again), not on other
	// allocatable changes.
	var hint fwk.QueueingHintFn
	for _, ext := range fw.EnqueueExtensions() {
		events, err := ext.EventsToRegister(c.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Event.Resource == fwk.Node && e.Event.ActionType == fwk.UpdateNodeAllocatable {
				hint = e.QueueingHintFn
			}
		}
	}
	if hint == nil {
		t.Fatal("GPUShare registers no hint for a node's allocatable changing")
	}
	grown := n1.DeepCopy()
	grown.Status.Allocatable["gpushare.io/gpu-mem"] = *k8sresource.NewQuantity(32768, k8sresource.DecimalSI)
	cpu := n1.DeepCopy()
	cpu.Status.Allocatable[corev1.ResourceCPU] = *k8sresource.NewQuantity(8, k8sresource.DecimalSI)
	pod := gpuPod("mib", "default-scheduler", 8192)
	for _, tc := range []struct {
		what string
		to   *corev1.Node
		want fwk.QueueingHint
	}{{"more gpushare.io/gpu-mem", grown, fwk.Queue}, {"more CPU", cpu, fwk.QueueSkip}} {
		if got, err := hint(klog.Background(), pod, n1, tc.to); err != nil || got != tc.want {
			t.Errorf("%s: hint %v, %v; want %v", tc.what, got, err, tc.want)
		}
	}
}
