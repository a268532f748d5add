package plugin_test

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// runningPod returns pod name of priority prio bound to node, started at
// start, holding mib of GPU gpu by its allocation record.
func runningPod(t *testing.T, name, node string, gpu int, mib int64, prio int32, start time.Time) *corev1.Pod {
	t.Helper()
	p := gpuPod(name, "default-scheduler", mib)
	p.Spec.NodeName = node
	p.Spec.Priority = &prio
	p.Labels = map[string]string{"app": name}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: start}}
	value, err := gpusharev1.Marshal(&gpusharev1.Allocation{Node: node, Containers: []gpusharev1.ContainerAllocation{{
		Name: "main", Kind: gpusharev1.ContainerApp,
		GPUs: []gpusharev1.GPUShare{{Index: gpu, UUID: "GPU-" + node + "-" + string(rune('0'+gpu)), MemoryMiB: mib}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{gpusharev1.AllocationAnnotation: value}
	return p
}

// highPod returns a pending pod of priority 1000 asking mib.
func highPod(name string, mib int64) *corev1.Pod {
	p := gpuPod(name, "default-scheduler", mib)
	prio := int32(1000)
	p.Spec.Priority = &prio
	return p
}

func podInfo(t *testing.T, p *corev1.Pod) fwk.PodInfo {
	t.Helper()
	pi, err := framework.NewPodInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

// preemptionCluster returns a cluster of node n with two 16 GiB GPUs:
// GPU 0 holds a (12 GiB, the oldest) and f (4 GiB); GPU 1 holds c, d and
// e (4 GiB each). All are of priority 0.
func preemptionCluster(t *testing.T) (*cluster, map[string]*corev1.Pod) {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pods := []*corev1.Pod{
		runningPod(t, "a", "n", 0, 12288, 0, t0),
		runningPod(t, "c", "n", 1, 4096, 0, t0.Add(1*time.Minute)),
		runningPod(t, "d", "n", 1, 4096, 0, t0.Add(2*time.Minute)),
		runningPod(t, "e", "n", 1, 4096, 0, t0.Add(3*time.Minute)),
		runningPod(t, "f", "n", 0, 4096, 0, t0.Add(4*time.Minute)),
	}
	byName := map[string]*corev1.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	return newClusterOf(t, []*corev1.Node{gpuNode(t, "n", 16384, 16384)}, pods...), byName
}

func preFilter(t *testing.T, c *cluster, fw framework.Framework, pod *corev1.Pod) fwk.CycleState {
	t.Helper()
	state := framework.NewCycleState()
	if _, s, _ := fw.RunPreFilterPlugins(c.ctx, state, pod); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	return state
}

// TestPreemptionCloneIsIndependent: pods removed on a clone of the cycle
// state free their GPUs for Filter on the clone only; the original state,
// and a new cycle, still see the node full.
func TestPreemptionCloneIsIndependent(t *testing.T) {
	c, pods := preemptionCluster(t)
	fw := c.profile("default-scheduler")
	c.start()

	pod := highPod("high", 12288)
	state := preFilter(t, c, fw, pod)
	ni := c.nodeInfo("n")
	if s := fw.RunFilterPlugins(c.ctx, state, pod, ni); s.IsSuccess() {
		t.Fatal("Filter passed a 12 GiB pod on a node with 4 GiB free per GPU")
	}
	clone := state.Clone()
	if s := fw.RunPreFilterExtensionRemovePod(c.ctx, clone, pod, podInfo(t, pods["a"]), ni); !s.IsSuccess() {
		t.Fatalf("RemovePod: %v", s)
	}
	if s := fw.RunFilterPlugins(c.ctx, clone, pod, ni); !s.IsSuccess() {
		t.Errorf("Filter on the clone with a removed: %v, want a pass", s)
	}
	if s := fw.RunFilterPlugins(c.ctx, state, pod, ni); s.IsSuccess() {
		t.Error("Filter on the original state passed: the clone's RemovePod leaked into it")
	}
	if s := fw.RunFilterPlugins(c.ctx, preFilter(t, c, fw, pod), pod, ni); s.IsSuccess() {
		t.Error("Filter in a new cycle passed: the dry run wrote the cache")
	}
}

// TestPreemptionAddAndRemovePod: RemovePod frees the pod's GPU for
// Filter, AddPod of the same pod takes it again, and AddPod of a
// nominated pod, which holds no GPU yet, books where it would go.
func TestPreemptionAddAndRemovePod(t *testing.T) {
	c, pods := preemptionCluster(t)
	fw := c.profile("default-scheduler")
	c.start()
	ni := c.nodeInfo("n")

	// GPU 1 has 4 GiB free; adding c, which the cache books there
	// already, changes nothing.
	small := highPod("small", 4096)
	state := preFilter(t, c, fw, small)
	if s := fw.RunPreFilterExtensionAddPod(c.ctx, state, small, podInfo(t, pods["c"]), ni); !s.IsSuccess() {
		t.Fatalf("AddPod: %v", s)
	}
	if s := fw.RunFilterPlugins(c.ctx, state, small, ni); !s.IsSuccess() {
		t.Errorf("Filter after AddPod of a pod the cache holds: %v, want a pass (booked once, not twice)", s)
	}

	pod := highPod("high", 8192)
	state = preFilter(t, c, fw, pod)
	a := podInfo(t, pods["a"])
	if s := fw.RunPreFilterExtensionRemovePod(c.ctx, state, pod, a, ni); !s.IsSuccess() {
		t.Fatalf("RemovePod: %v", s)
	}
	if s := fw.RunFilterPlugins(c.ctx, state, pod, ni); !s.IsSuccess() {
		t.Errorf("Filter with a removed: %v, want a pass (GPU 0 has 12 GiB free)", s)
	}
	if s := fw.RunPreFilterExtensionAddPod(c.ctx, state, pod, a, ni); !s.IsSuccess() {
		t.Fatalf("AddPod: %v", s)
	}
	if s := fw.RunFilterPlugins(c.ctx, state, pod, ni); s.IsSuccess() {
		t.Error("Filter passed with a added back")
	}

	// With a removed again, a nominated pod of 10 GiB takes GPU 0's room.
	if s := fw.RunPreFilterExtensionRemovePod(c.ctx, state, pod, a, ni); !s.IsSuccess() {
		t.Fatalf("RemovePod: %v", s)
	}
	nominated := highPod("nominated", 10240)
	if s := fw.RunPreFilterExtensionAddPod(c.ctx, state, pod, podInfo(t, nominated), ni); !s.IsSuccess() {
		t.Fatalf("AddPod of a nominated pod: %v", s)
	}
	if s := fw.RunFilterPlugins(c.ctx, state, pod, ni); s.IsSuccess() {
		t.Error("Filter passed though the nominated pod takes the freed GPU")
	}
	if s := fw.RunPreFilterExtensionRemovePod(c.ctx, state, pod, podInfo(t, nominated), ni); !s.IsSuccess() {
		t.Fatalf("RemovePod of the nominated pod: %v", s)
	}
	if s := fw.RunFilterPlugins(c.ctx, state, pod, ni); !s.IsSuccess() {
		t.Errorf("Filter with the nominated pod gone again: %v, want a pass", s)
	}
}

// TestPreemptionVictimsFreeOneGPU: kube-scheduler's DefaultPreemption,
// run over the plugin, evicts the cheapest set that frees one GPU. A 12
// GiB pod fits GPU 0 once a (one pod) goes, or GPU 1 once two of c, d and
// e go. DefaultPreemption alone returns pods oldest first (a, c, d, e, f)
// and would evict d and e; the plugin's plan makes it evict a alone. The
// dry run leaves the cache as it was.
func TestPreemptionVictimsFreeOneGPU(t *testing.T) {
	c, _ := preemptionCluster(t)
	fw := c.profile("default-scheduler", frameworkruntime.WithPodNominator(nominator{}))
	c.start()
	dp, err := defaultpreemption.New(c.ctx, &config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}, fw, feature.Features{})
	if err != nil {
		t.Fatal(err)
	}

	pod := highPod("high", 12288)
	state := preFilter(t, c, fw, pod)
	ni := c.nodeInfo("n").Snapshot()
	victims, _, s := selectVictims(t, c, dp, state, pod, ni, nil)
	if !s.IsSuccess() {
		t.Fatalf("SelectVictimsOnNode: %v", s)
	}
	var names []string
	for _, v := range victims {
		names = append(names, v.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a"}) {
		t.Errorf("victims %v, want [a]: the one pod whose eviction frees a GPU for 12 GiB", names)
	}
	if s := fw.RunFilterPlugins(c.ctx, preFilter(t, c, fw, pod), pod, c.nodeInfo("n")); s.IsSuccess() {
		t.Error("after the dry run a new cycle passed the node: the dry run wrote the cache")
	}

	t.Run("a smaller pod", func(t *testing.T) {
		// 8 GiB fits GPU 1 once one of c, d, e goes (e, the youngest),
		// or GPU 0 once a goes: both one pod; e frees less memory.
		pod := highPod("mid", 8192)
		state := preFilter(t, c, fw, pod)
		victims, _, s := selectVictims(t, c, dp, state, pod, c.nodeInfo("n").Snapshot(), nil)
		if !s.IsSuccess() {
			t.Fatalf("SelectVictimsOnNode: %v", s)
		}
		if len(victims) != 1 || victims[0].Name != "e" {
			t.Errorf("victims %v, want e alone", victims)
		}
	})
}

// TestPreemptionNominatedPodHoldsItsGPU: a pod nominated to a node after
// its preemption keeps the GPU it freed from a pod of no higher priority
// that comes meanwhile, through RunFilterPluginsWithNominatedPods.
func TestPreemptionNominatedPodHoldsItsGPU(t *testing.T) {
	c := newClusterOf(t, []*corev1.Node{gpuNode(t, "n", 16384)})
	nominated := highPod("nominated", 12288)
	fw := c.profile("default-scheduler", frameworkruntime.WithPodNominator(nominator{"n": {podInfo(t, nominated)}}))
	c.start()

	for _, pod := range []*corev1.Pod{gpuPod("low", "default-scheduler", 8192), highPod("peer", 8192)} {
		s := fw.RunFilterPluginsWithNominatedPods(c.ctx, preFilter(t, c, fw, pod), pod, c.nodeInfo("n"))
		if s.IsSuccess() {
			t.Errorf("pod %s passed the node whose GPU a nominated pod of 12 GiB holds", pod.Name)
		}
	}
	pod := gpuPod("fits", "default-scheduler", 4096)
	if s := fw.RunFilterPluginsWithNominatedPods(c.ctx, preFilter(t, c, fw, pod), pod, c.nodeInfo("n")); !s.IsSuccess() {
		t.Errorf("a 4 GiB pod beside the nominated pod: %v, want a pass", s)
	}
}

// TestPreemptionSparesBudgetedPods: when a PodDisruptionBudget allows
// no disruption of a, the 12 GiB pod goes to GPU 1 at the cost of d and
// e, whose eviction no budget forbids.
func TestPreemptionSparesBudgetedPods(t *testing.T) {
	c, _ := preemptionCluster(t)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "keep-a", Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
	}
	if _, err := c.client.PolicyV1().PodDisruptionBudgets("default").Create(c.ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fw := c.profile("default-scheduler", frameworkruntime.WithPodNominator(nominator{}))
	c.start()
	dp, err := defaultpreemption.New(c.ctx, &config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}, fw, feature.Features{})
	if err != nil {
		t.Fatal(err)
	}

	pod := highPod("high", 12288)
	victims, violations, s := selectVictims(t, c, dp, preFilter(t, c, fw, pod), pod, c.nodeInfo("n").Snapshot(), []*policyv1.PodDisruptionBudget{pdb})
	if !s.IsSuccess() {
		t.Fatalf("SelectVictimsOnNode: %v", s)
	}
	var names []string
	for _, v := range victims {
		names = append(names, v.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"d", "e"}) || violations != 0 {
		t.Errorf("victims %v with %d budget violations, want [d e] with none", names, violations)
	}
}

// TestPreemptionVictimsFreeTheGPUsOfOnePlacement: a pod that needs two
// GPUs of 12 GiB on a node whose four 16 GiB GPUs hold a (12 GiB), b (12
// GiB), c, d, e (4 GiB each) and f, g (8 GiB each), oldest first, evicts
// a and b, the cheapest two GPUs to free, not a GPU of two or three
// pods.
func TestPreemptionVictimsFreeTheGPUsOfOnePlacement(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var pods []*corev1.Pod
	for i, p := range []struct {
		name string
		gpu  int
		gib  int64
	}{{"a", 0, 12}, {"b", 1, 12}, {"c", 2, 4}, {"d", 2, 4}, {"e", 2, 4}, {"f", 3, 8}, {"g", 3, 8}} {
		pods = append(pods, runningPod(t, p.name, "n", p.gpu, p.gib*1024, 0, t0.Add(time.Duration(i)*time.Minute)))
	}
	c := newClusterOf(t, []*corev1.Node{gpuNode(t, "n", 16384, 16384, 16384, 16384)}, pods...)
	fw := c.profile("default-scheduler", frameworkruntime.WithPodNominator(nominator{}))
	c.start()
	dp, err := defaultpreemption.New(c.ctx, &config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}, fw, feature.Features{})
	if err != nil {
		t.Fatal(err)
	}

	pod := highPod("pair", 24576)
	count := *k8sresource.NewQuantity(2, k8sresource.DecimalSI)
	pod.Spec.Containers[0].Resources.Limits["gpushare.io/gpu-count"] = count
	pod.Spec.Containers[0].Resources.Requests["gpushare.io/gpu-count"] = count
	victims, _, s := selectVictims(t, c, dp, preFilter(t, c, fw, pod), pod, c.nodeInfo("n").Snapshot(), nil)
	if !s.IsSuccess() {
		t.Fatalf("SelectVictimsOnNode: %v", s)
	}
	var names []string
	for _, v := range victims {
		names = append(names, v.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("victims %v, want [a b]: the two pods whose eviction frees two GPUs", names)
	}
}

// nominator is a PodNominator that holds the nominated pods by node.
type nominator map[string][]fwk.PodInfo

func (nominator) AddNominatedPod(klog.Logger, fwk.PodInfo, *fwk.NominatingInfo) {}
func (nominator) DeleteNominatedPodIfExists(*corev1.Pod)                        {}
func (nominator) UpdateNominatedPod(klog.Logger, *corev1.Pod, fwk.PodInfo)      {}
func (n nominator) NominatedPodsForNode(node string) []fwk.PodInfo              { return n[node] }

// selectVictims runs the default preemption's dry run on node ni (a
// snapshot) as the scheduler does: every pod on the node a possible victim.
func selectVictims(t *testing.T, c *cluster, dp *defaultpreemption.DefaultPreemption, state fwk.CycleState, pod *corev1.Pod,
	ni fwk.NodeInfo, pdbs []*policyv1.PodDisruptionBudget) ([]*corev1.Pod, int, *fwk.Status) {
	t.Helper()
	possible, err := dp.Evaluator.GetVictimsOnNode(c.ctx, c.nodeInfo(ni.Node().Name))
	if err != nil {
		t.Fatal(err)
	}
	return dp.SelectVictimsOnNode(c.ctx, state.Clone(), pod, ni, possible, pdbs)
}
