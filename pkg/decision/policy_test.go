package decision_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/decision"
	"github.com/gpushare/gpushare/pkg/resource"
)

func loadArgs(t *testing.T, yaml string) (*v1alpha1.GPUShareArgs, *resource.Model) {
	t.Helper()
	args, err := v1alpha1.LoadArgs([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	model, err := resource.New(args.ResourceModel)
	if err != nil {
		t.Fatal(err)
	}
	return args, model
}

// TestPolicyFromArgs: the default learns; configured shapes are the prior,
// or the workload itself with learn: false; a shape that asks for no GPU
// is an error naming it.
func TestPolicyFromArgs(t *testing.T) {
	args, model := loadArgs(t, "")
	p, err := decision.Policy(args, model)
	if err != nil || !p.Learns() {
		t.Fatalf("default args: learns %v, %v; want a learning policy", p != nil && p.Learns(), err)
	}

	const shapes = `
workload:
  learn: false
  shapes:
  - weight: 3
    requests: {cpu: "4", gpushare.io/gpu-core: "50"}
    models: [T4]
  - weight: 1
    requests: {aliyun.com/gpu-mem: "8"}
`
	args, model = loadArgs(t, shapes)
	if p, err = decision.Policy(args, model); err != nil || p.Learns() {
		t.Fatalf("learn: false: learns %v, %v; want a fixed workload", p != nil && p.Learns(), err)
	}

	args, model = loadArgs(t, "workload:\n  shapes:\n  - {weight: 1, requests: {cpu: \"2\"}}\n")
	if _, err := decision.Policy(args, model); err == nil || !strings.Contains(err.Error(), "workload.shapes[0]") {
		t.Errorf("a shape without GPUs: %v; want an error naming workload.shapes[0]", err)
	}
	if _, err := v1alpha1.LoadArgs([]byte("workload:\n  learn: false\n")); err == nil {
		t.Error("learn: false without shapes: want an error")
	}

	if p.KeepsIdle() {
		t.Error("default args keep idle GPUs spare; want not unless asked")
	}
	args, model = loadArgs(t, "workload:\n  keepIdleGPUs: true\n")
	if p, err = decision.Policy(args, model); err != nil || !p.KeepsIdle() {
		t.Errorf("keepIdleGPUs: true: keeps %v, %v; want a policy that keeps idle GPUs spare", p != nil && p.KeepsIdle(), err)
	}
	for bad, why := range map[string]string{
		"nodePolicy: binpack\nworkload:\n  keepIdleGPUs: true\n":            `fragmentation-aware nodePolicy (fgd, fgd-pack, fgd-fill, fgd-robust), not "binpack"`,
		"workload:\n  keepIdleGPUs: true\n" + shapes[len("\nworkload:\n"):]: "workload.learn is false",
	} {
		args, model = loadArgs(t, bad)
		if _, err := decision.Policy(args, model); err == nil || !strings.Contains(err.Error(), "workload.keepIdleGPUs: ") || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v; want an error naming workload.keepIdleGPUs and %q", bad, err, why)
		}
	}
}

// TestLearn: a restarted scheduler learns the bound pods that have not
// ended: a pending or finished pod does not count, and a pod without GPUs
// counts by its CPU alone, when its node has gpushare GPUs and gpuNode is
// given (the plugin's restart; the extender's gives none).
func TestLearn(t *testing.T) {
	args, model := loadArgs(t, "")
	pod := func(uid, node string, gpu bool, cpu string, phase corev1.PodPhase) *corev1.Pod {
		if phase == corev1.PodPending {
			node = ""
		}
		c := corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse(cpu)}}}
		if gpu {
			c.Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-core": k8sresource.MustParse("30")}
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID("uid-" + uid)},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{c}}, Status: corev1.PodStatus{Phase: phase}}
	}
	pods := []*corev1.Pod{pod("a", "n1", true, "3", corev1.PodRunning), pod("b", "n1", false, "3", corev1.PodRunning),
		pod("c", "n1", true, "3", corev1.PodSucceeded), pod("d", "n1", true, "3", corev1.PodPending),
		pod("e", "n1", false, "7", corev1.PodSucceeded), pod("f", "n1", false, "7", corev1.PodPending),
		pod("g", "cpu-only", false, "7", corev1.PodRunning)}
	gpuNode := func(name string) bool { return name == "n1" }
	for _, c := range []struct {
		what    string
		gpuNode func(string) bool
		withCPU bool
	}{{"the plugin's restart", gpuNode, true}, {"the extender's restart", nil, false}} {
		p, err := decision.Policy(args, model)
		if err != nil {
			t.Fatal(err)
		}
		if n := decision.Learn(p, model, pods, c.gpuNode); n != 1 || p.Learner().Observed() != 1 {
			t.Errorf("%s: learned %d pods (observed %d), want 1: the running GPU pod", c.what, n, p.Learner().Observed())
		}
		mix := p.Learner().Mix()
		last := mix[len(mix)-1]
		switch {
		case c.withCPU && (last.Count != 0 || last.CPUMilli != 3000):
			t.Errorf("%s: mix %+v, want it to end with the running pod without GPUs on n1, 3 CPUs", c.what, mix)
		case !c.withCPU && last.Count == 0:
			t.Errorf("%s: mix %+v, want no pods without GPUs", c.what, mix)
		}
	}
}

// TestKept: a pod waits beside kept idle GPUs for at most the policy's
// keepIdleFor from its creation; a negative bound is refused.
func TestKept(t *testing.T) {
	args, model := loadArgs(t, "workload: {keepIdleGPUs: true, keepIdleFor: 30s}\n")
	p, err := decision.Policy(args, model)
	if err != nil {
		t.Fatal(err)
	}
	if p.KeepFor() != 30*time.Second {
		t.Fatalf("keepIdleFor 30s: the policy keeps for %v", p.KeepFor())
	}
	sp := alloc.Spare{Whole: 1}
	placer := p.Placer().Sparing(&sp)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", CreationTimestamp: metav1.NewTime(time.Unix(1000, 0))}}
	if got := decision.Kept(p, placer, pod, time.Unix(1029, 0)); got.Spare() == nil {
		t.Error("a pod 29 s old is placed without keeping idle GPUs; want them kept until 30 s")
	}
	if got := decision.Kept(p, placer, pod, time.Unix(1030, 0)); got.Spare() != nil {
		t.Error("a pod 30 s old still has idle GPUs kept from it")
	}
	if got := decision.Kept(p, p.Placer(), pod, time.Unix(1030, 0)); got != p.Placer() {
		t.Error("a Placer that keeps nothing was replaced")
	}

	args, model = loadArgs(t, "workload: {keepIdleGPUs: true}\n")
	if p, err = decision.Policy(args, model); err != nil || p.KeepFor() != time.Minute {
		t.Errorf("keepIdleFor unset: keeps for %v, %v; want the default, 1m", p.KeepFor(), err)
	}
	if _, err := v1alpha1.LoadArgs([]byte("workload: {keepIdleFor: -1s}\n")); err == nil || !strings.Contains(err.Error(), "workload.keepIdleFor") {
		t.Errorf("keepIdleFor -1s: %v; want an error naming workload.keepIdleFor", err)
	}
}
