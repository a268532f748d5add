package plugin_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// activator records the pods moved back to the scheduling queue.
type activator struct {
	mu   sync.Mutex
	pods []string
}

func (a *activator) Activate(_ klog.Logger, pods map[string]*corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key := range pods {
		a.pods = append(a.pods, key)
	}
}

func (a *activator) activated() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.pods...)
}

// TestPluginKeepsIdleGPUs: with workload.keepIdleGPUs, a share that only
// an idle GPU fits waits (GPUKeptSpare) while the learned mix expects
// more whole-GPU demand than the idle GPUs can take. The shares turned
// away wait: once their demand ends the keeping, the policy reads the
// room again at once and the pods kept are retried, with no cluster
// event needed, and then fit.
// keptCluster is a scheduler whose default profile has learned a mix in
// which whole GPUs are most of the demand expected, with workload args
// extra: node a has four GPUs half used, node b one idle GPU, and two
// pending shares of 0.75, created now, fit only b's.
func keptCluster(t *testing.T, extra string) (*cluster, framework.Framework, *activator, *corev1.Pod, *corev1.Pod) {
	t.Helper()
	const mib, share = 16384, 12288 // a share of 0.75
	var pods []*corev1.Pod
	for i := range 4 {
		pods = append(pods, runningPod(t, fmt.Sprintf("held-%d", i), "a", i, mib/2, 0, time.Now()))
	}
	first, second := gpuPod("share-1", "default-scheduler", share), gpuPod("share-2", "default-scheduler", share)
	first.CreationTimestamp, second.CreationTimestamp = metav1.Now(), metav1.Now()
	c := newClusterOf(t, []*corev1.Node{gpuNode(t, "a", mib, mib, mib, mib), gpuNode(t, "b", mib)}, append(pods, first, second)...)
	c.args = []byte("workload: {keepIdleGPUs: true, warmup: 1" + extra + "}\n")
	act := &activator{}
	fw := c.profile("default-scheduler", frameworkruntime.WithPodActivator(act))
	c.start()
	if n := c.plugins["default-scheduler"].KeptSeries(); n != 1 {
		t.Errorf("gpushare_scheduler_idle_gpus_kept has %d series before any keeping, want the profile's, at 0", n)
	}

	// The learned mix: whole GPUs are most of the demand expected.
	for i := range 48 {
		for _, p := range []*corev1.Pod{wholePod(fmt.Sprintf("whole-%d", i)), gpuPod(fmt.Sprintf("part-%d", i), "default-scheduler", share)} {
			if i >= 36 && strings.HasPrefix(p.Name, "part-") {
				continue
			}
			state := framework.NewCycleState()
			if _, s, _ := fw.RunPreFilterPlugins(c.ctx, state, p); !s.IsSuccess() {
				t.Fatalf("PreFilter %s: %v", p.Name, s)
			}
			fw.RunPostBindPlugins(c.ctx, state, p, "elsewhere")
		}
	}
	return c, fw, act, first, second
}

// keptOff checks that pod, turned away from b's idle GPU while it is kept
// and fitting none of a's, goes through PostFilter.
func keptOff(t *testing.T, c *cluster, fw framework.Framework, pod *corev1.Pod) {
	t.Helper()
	state, statuses := c.filter(fw, pod)
	if s := statuses["b"]; s == nil || !strings.Contains(s.Message(), string(alloc.ReasonGPUSpare)) {
		t.Fatalf("%s on b's idle GPU: %v; want it kept (%s)", pod.Name, s, alloc.ReasonGPUSpare)
	}
	if statuses["a"] == nil {
		t.Fatalf("%s fits a's half-free GPUs", pod.Name)
	}
	if _, s := fw.RunPostFilterPlugins(c.ctx, state, pod, nil); s.Code() != fwk.Unschedulable {
		t.Fatalf("PostFilter %s: %v", pod.Name, s)
	}
}

func TestPluginKeepsIdleGPUs(t *testing.T) {
	c, fw, act, first, second := keptCluster(t, "")
	// One idle GPU against 3 GPUs' worth free, of which whole-GPU pods
	// are expected to take more than half: the idle GPU is kept.
	fail := func(pod *corev1.Pod) { keptOff(t, c, fw, pod) }
	if sp := c.plugins["default-scheduler"].Sparing(); sp == nil || sp.Whole < 0.5 || sp.Whole > 0.7 {
		t.Fatalf("after the mix was learned: keeps %+v; want idle GPUs kept for a whole-GPU share of 0.5-0.7", sp)
	}
	fail(first)
	if kept, waiting := c.plugins["default-scheduler"].Metrics(); kept != 1 || waiting != 0.75 {
		t.Errorf("metrics: idle GPUs kept %v, GPU demand waiting %v; want 1 and 0.75", kept, waiting)
	}
	if got := act.activated(); len(got) != 0 {
		t.Fatalf("pods retried %v while the idle GPU is still kept", got)
	}
	// With the first share waiting, 2.25 GPUs' worth of free share is
	// still expected to take more than one whole GPU; with the second
	// too, 1.5 GPUs' worth no longer calls for the idle GPU.
	fail(second)
	if got := act.activated(); !slices.Contains(got, "default/share-1") || !slices.Contains(got, "default/share-2") {
		t.Fatalf("pods retried: %v; want both shares once the keeping ended", got)
	}
	if kept, waiting := c.plugins["default-scheduler"].Metrics(); kept != 0 || waiting != 1.5 {
		t.Errorf("metrics: idle GPUs kept %v, GPU demand waiting %v; want 0 and 1.5", kept, waiting)
	}
	if _, statuses := c.filter(fw, first); statuses["b"] != nil {
		t.Errorf("share-1 retried: b says %v, want it to fit", statuses["b"])
	}
	if got := c.plugins["default-scheduler"].Waiting(); got != 2*750 {
		t.Errorf("waiting GPU demand %d, want both shares' 1500", got)
	}
}

// wholePod returns a pending pod asking one whole GPU.
func wholePod(name string) *corev1.Pod {
	p := gpuPod(name, "default-scheduler", 0)
	l := corev1.ResourceList{"gpushare.io/gpu-core": *k8sresource.NewQuantity(100, k8sresource.DecimalSI)}
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}
	return p
}

// TestPluginKeepsIdleGPUsForAWhile: a pod kept from idle GPUs waits at
// most workload.keepIdleFor from its creation. Then it is retried, with
// no cluster event, and placed on an idle GPU while the others are still
// kept from pods that have not waited as long.
func TestPluginKeepsIdleGPUsForAWhile(t *testing.T) {
	const keepFor = 400 * time.Millisecond
	c, fw, act, first, _ := keptCluster(t, ", keepIdleFor: 400ms")
	keptOff(t, c, fw, first)
	if got := act.activated(); len(got) != 0 {
		t.Fatalf("pods retried %v at once; want share-1 only once it has waited %v", got, keepFor)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(act.activated(), "default/share-1") {
		if time.Now().After(deadline) {
			t.Fatalf("share-1 not retried 5 s after it was kept (keepIdleFor %v); retried %v", keepFor, act.activated())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if waited := time.Since(first.CreationTimestamp.Time); waited < keepFor {
		t.Errorf("share-1 retried %v after its creation, before keepIdleFor's %v", waited, keepFor)
	}
	if _, statuses := c.filter(fw, first); statuses["b"] != nil {
		t.Errorf("share-1 retried past keepIdleFor: b says %v, want it to fit", statuses["b"])
	}
	if kept, _ := c.plugins["default-scheduler"].Metrics(); kept != 1 {
		t.Errorf("idle GPUs kept %v once share-1 waited long enough; want 1: others are still kept", kept)
	}
	young := gpuPod("share-3", "default-scheduler", 12288)
	young.CreationTimestamp = metav1.Now()
	keptOff(t, c, fw, young)
}

// TestPluginCountsKeptGangPods: a PodGroup's pod that fits nowhere gets
// no PostFilter, so PreFilter counts its demand as waiting while idle
// GPUs are kept, and reads the room again with it: the second share of
// a gang ends the keeping at once, as the second share turned away does
// in TestPluginKeepsIdleGPUs, and takes the idle GPU.
func TestPluginCountsKeptGangPods(t *testing.T) {
	c, fw, act, first, second := keptCluster(t, "")
	group := "train"
	for _, p := range []*corev1.Pod{first, second} {
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
	}
	pl := c.plugins["default-scheduler"]
	if _, statuses := c.filter(fw, first); statuses["b"] == nil || !strings.Contains(statuses["b"].Message(), string(alloc.ReasonGPUSpare)) {
		t.Fatalf("the gang's first share on b's idle GPU: %v; want it kept", statuses["b"])
	}
	if kept, waiting := pl.Metrics(); kept != 1 || waiting != 0.75 {
		t.Errorf("after the first share's filter, no PostFilter: idle GPUs kept %v, GPU demand waiting %v; want 1 and 0.75", kept, waiting)
	}
	if _, statuses := c.filter(fw, second); statuses["b"] != nil {
		t.Fatalf("the gang's second share on b: %v; want it to fit once both shares' demand waits", statuses["b"])
	}
	if kept, waiting := pl.Metrics(); kept != 0 || waiting != 1.5 {
		t.Errorf("idle GPUs kept %v, GPU demand waiting %v; want 0 and 1.5", kept, waiting)
	}
	if got := act.activated(); !slices.Contains(got, "default/share-1") {
		t.Errorf("pods retried: %v; want the gang's first share once the keeping ended", got)
	}
	// Kept, a gang's share is retried once it has waited keepIdleFor,
	// as a pod turned away in PostFilter is; then it is placed as if
	// nothing were kept, and not retried again.
	c3, fw3, act3, old, _ := keptCluster(t, ", keepIdleFor: 300ms")
	old.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
	if _, statuses := c3.filter(fw3, old); statuses["b"] == nil {
		t.Fatal("the gang's share fits b's idle GPU at once; want it kept")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(act3.activated(), "default/share-1") {
		if time.Now().After(deadline) {
			t.Fatalf("the kept gang share not retried 5 s after its filter; retried %v", act3.activated())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, statuses := c3.filter(fw3, old); statuses["b"] != nil {
		t.Errorf("past keepIdleFor: b says %v, want the gang's share to fit", statuses["b"])
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(act3.activated()); n != 1 {
		t.Errorf("retried %d times; want once: past keepIdleFor nothing keeps it", n)
	}

	// Pods outside PodGroups count only once turned away, in PostFilter.
	c2, fw2, _, plain, _ := keptCluster(t, "")
	c2.filter(fw2, plain)
	if _, waiting := c2.plugins["default-scheduler"].Metrics(); waiting != 0 {
		t.Errorf("a pod outside a PodGroup waits %v after its filter alone; want 0 until PostFilter", waiting)
	}
}
