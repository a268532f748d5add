package plugin

import (
	"os"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkplugins "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// fitPod asks 100m of CPU and 4096 of gpushare.io/gpu-mem.
func fitPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse("100m"), "gpushare.io/gpu-mem": k8sresource.MustParse("4096")},
			Limits:   corev1.ResourceList{"gpushare.io/gpu-mem": k8sresource.MustParse("4096")},
		}}}}}
}

// fitNode has cpu milli-CPUs and advertises no gpushare.io/gpu-mem.
func fitNode(cpu string) fwk.NodeInfo {
	n := framework.NewNodeInfo()
	n.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: k8sresource.MustParse(cpu), corev1.ResourcePods: k8sresource.MustParse("110")}}})
	return n
}

// TestLeaveToGPUShare runs kube-scheduler's own NodeResourcesFit, set to
// check every resource: once GPUShare has taken its resources out of the
// state, Fit no longer holds the node to them, and still to CPU.
func TestLeaveToGPUShare(t *testing.T) {
	ctx := t.Context()
	args := &config.NodeResourcesFitArgs{ScoringStrategy: &config.ScoringStrategy{Type: config.LeastAllocated,
		Resources: []config.ResourceSpec{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}}}}
	p, err := noderesources.NewFit(ctx, args, nil, plfeature.Features{})
	if err != nil {
		t.Fatal(err)
	}
	fit := p.(fwk.FilterPlugin)
	pod := fitPod()
	asks := kubeletAsks(pod, []corev1.ResourceName{"gpushare.io/gpu-mem"})

	state := framework.NewCycleState()
	if leaveToGPUShare(state, asks) {
		t.Fatal("leaveToGPUShare reports a change with no NodeResourcesFit state")
	}
	if _, s := p.(fwk.PreFilterPlugin).PreFilter(ctx, state, pod, nil); !s.IsSuccess() {
		t.Fatal(s)
	}
	if s := fit.Filter(ctx, state, pod, fitNode("2")); s.IsSuccess() {
		t.Fatal("NodeResourcesFit passes a node that advertises no gpushare.io/gpu-mem before leaveToGPUShare: the test shows nothing")
	}
	if leaveToGPUShare(state, nil) {
		t.Fatal("leaveToGPUShare reports a change for a pod that asks none of GPUShare's resources")
	}
	if !leaveToGPUShare(state, asks) {
		t.Fatalf("leaveToGPUShare did not find the requests in NodeResourcesFit's state (%q): has kube-scheduler changed it?", fitStateKey)
	}
	if s := fit.Filter(ctx, state, pod, fitNode("2")); !s.IsSuccess() {
		t.Fatalf("NodeResourcesFit still checks gpushare.io/gpu-mem: %v", s)
	}
	if s := fit.Filter(ctx, state, pod, fitNode("50m")); s.IsSuccess() || !slices.Contains(s.Reasons(), "Insufficient cpu") {
		t.Fatalf("NodeResourcesFit no longer checks CPU: %v", s)
	}
	// A clone, as preemption takes, keeps the change.
	if s := fit.Filter(ctx, state.Clone(), pod, fitNode("2")); !s.IsSuccess() {
		t.Fatalf("a clone of the state checks gpushare.io/gpu-mem again: %v", s)
	}
}

// fitRequest takes nothing else for NodeResourcesFit's requests: no
// state, a nil one, one without a Resource, one whose Resource is of
// another type, one that is not a pointer.
func TestFitRequestOtherShapes(t *testing.T) {
	for _, data := range []fwk.StateData{nil, (*noResource)(nil), &noResource{}, &otherResource{}, valueResource{}} {
		if r := fitRequest(data); r != nil {
			t.Errorf("fitRequest(%T) = %v, want nil", data, r)
		}
	}
}

type noResource struct{}

func (s *noResource) Clone() fwk.StateData { return s }

type otherResource struct{ Resource int }

func (s *otherResource) Clone() fwk.StateData { return s }

type valueResource struct{ framework.Resource }

func (s valueResource) Clone() fwk.StateData { return s }

// TestDeployedProfilesRunFitFirst builds the frameworks of
// deploy/scheduler-config.yaml as kube-scheduler does, with its in-tree
// plugins: in each, NodeResourcesFit's PreFilter runs before GPUShare's,
// so that GPUShare finds Fit's state to take its resources out of.
func TestDeployedProfilesRunFitFirst(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDecoder().Decode(raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := obj.(*config.KubeSchedulerConfiguration)
	if len(cfg.Profiles) == 0 {
		t.Fatal("deploy/scheduler-config.yaml has no profiles")
	}
	registry := frameworkplugins.NewInTreeRegistry()
	if err := registry.Merge(frameworkruntime.Registry{Name: New(NewShared(func(...prometheus.Collector) {}))}); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	for i := range cfg.Profiles {
		profile := &cfg.Profiles[i]
		fw, err := frameworkruntime.NewFramework(t.Context(), registry, profile,
			frameworkruntime.WithClientSet(client),
			frameworkruntime.WithInformerFactory(factory),
			frameworkruntime.WithSnapshotSharedLister(schedcache.NewEmptySnapshot()),
			frameworkruntime.WithEventRecorder(events.NewFakeRecorder(100)))
		if err != nil {
			t.Fatalf("profile %s: %v", profile.SchedulerName, err)
		}
		var order []string
		for _, p := range fw.ListPlugins().PreFilter.Enabled {
			order = append(order, p.Name)
		}
		fitAt, gpuAt := slices.Index(order, names.NodeResourcesFit), slices.Index(order, Name)
		if fitAt < 0 || gpuAt < fitAt {
			t.Errorf("profile %s runs PreFilter in the order %v: want %s before %s", profile.SchedulerName, order, names.NodeResourcesFit, Name)
		}
	}
}
