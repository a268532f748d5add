package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// TestPodsWithoutGPUs: gpushare-scheduler, as the default scheduler and
// as gpu-scheduler, schedules pods that ask for no GPU as kube-scheduler
// would, among GPU pods: node selectors, taints and tolerations, required
// node affinity, topology spread and preemption are respected, and such
// pods carry no allocation record.
func TestPodsWithoutGPUs(t *testing.T) {
	t.Parallel()
	_, client, _ := startPlugin(t, nil)
	ctx := context.Background()
	createNodes(t, client,
		controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 15360, Count: 2},
		controlplane.NodeSpec{Name: "gpu-b", Model: "Tesla T4", MemoryMiB: 15360, Count: 2},
		controlplane.NodeSpec{Name: "cpu-a", Bare: true},
		controlplane.NodeSpec{Name: "cpu-b", Bare: true},
		controlplane.NodeSpec{Name: "infra", Bare: true},
		controlplane.NodeSpec{Name: "small", Bare: true, CPU: 2, MemoryGiB: 8},
	)
	zones := map[string]string{"gpu-a": "a", "cpu-a": "a", "gpu-b": "b", "cpu-b": "b", "infra": "c", "small": "c"}
	for node, zone := range zones {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"zone":%q}}}`, zone)
		if node == "infra" {
			patch = `{"metadata":{"labels":{"zone":"c","role":"infra"}},"spec":{"taints":[{"key":"dedicated","value":"infra","effect":"NoSchedule"}]}}`
		}
		if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	plain := func(name, scheduler string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"test": "nogpu"}},
			Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse("100m")}}}}},
		}
	}
	var pods []*corev1.Pod
	pods = append(pods, plain("plain", ""), plain("plain-gpu-scheduler", "gpu-scheduler"))
	zoneB := plain("zone-b", "")
	zoneB.Spec.NodeSelector = map[string]string{"zone": "b"}
	infra := plain("infra-only", "gpu-scheduler")
	infra.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra", Effect: corev1.TaintEffectNoSchedule}}
	infra.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "role", Operator: corev1.NodeSelectorOpIn, Values: []string{"infra"}}}}}}}}
	pods = append(pods, zoneB, infra)
	for i := range 6 {
		p := plain(fmt.Sprintf("spread-%d", i), "")
		p.Labels["app"] = "spread"
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}}}}}
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone",
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		pods = append(pods, p)
	}
	// GPU pods beside them, under both profiles.
	for i := range 3 {
		g := gpuPod(fmt.Sprintf("gpu-%d", i), 4096, 0)
		if i == 2 {
			g.Spec.SchedulerName = "gpu-scheduler"
		}
		pods = append(pods, g)
	}
	for _, p := range pods {
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bound := map[string]*corev1.Pod{}
	for _, p := range pods {
		bound[p.Name] = boundPod(t, client, "default", p.Name)
	}
	for name, p := range bound {
		_, recorded := p.Annotations[gpusharev1.AllocationAnnotation]
		gpu := len(name) > 4 && name[:4] == "gpu-"
		if recorded != gpu {
			t.Errorf("pod %s on %s: has a record %v, asks for GPUs %v", name, p.Spec.NodeName, recorded, gpu)
		}
		if p.Spec.NodeName == "infra" && name != "infra-only" {
			t.Errorf("pod %s landed on the tainted node infra without tolerating it", name)
		}
	}
	if n := bound["zone-b"].Spec.NodeName; zones[n] != "b" {
		t.Errorf("pod zone-b (nodeSelector zone=b) landed on %s in zone %s", n, zones[n])
	}
	if n := bound["infra-only"].Spec.NodeName; n != "infra" {
		t.Errorf("pod infra-only (required affinity role=infra) landed on %s", n)
	}
	perZone := map[string]int{}
	for i := range 6 {
		perZone[zones[bound[fmt.Sprintf("spread-%d", i)].Spec.NodeName]]++
	}
	if perZone["a"]+perZone["b"] != 6 || perZone["a"]-perZone["b"] > 1 || perZone["b"]-perZone["a"] > 1 {
		t.Errorf("topology spread over zones a and b with maxSkew 1: got %v", perZone)
	}
	checkNoOvercommit(t, client)

	// Preemption of pods without GPUs: a high-priority pod that needs the
	// whole of node small evicts the low-priority pod holding it.
	preemptsWithoutGPUs(t, client)
}

func preemptsWithoutGPUs(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	high := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000}
	if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pinned := func(name, priorityClass string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{PriorityClassName: priorityClass, NodeSelector: map[string]string{corev1.LabelHostname: "small"},
				Containers: []corev1.Container{{Name: "main", Image: "busybox",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse("1500m")}}}}},
		}
	}
	holdCPU(t, client, "small", "2")
	if _, err := client.CoreV1().Pods("default").Create(ctx, pinned("low", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	low := boundPod(t, client, "default", "low")
	if _, err := client.CoreV1().Pods("default").Create(ctx, pinned("urgent", "high"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	urgent := boundPod(t, client, "default", "urgent")
	if urgent.Spec.NodeName != "small" {
		t.Fatalf("pod urgent landed on %s, not small", urgent.Spec.NodeName)
	}
	err := waitFor(30*time.Second, func() (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "low", metav1.GetOptions{})
		return err != nil || p.UID != low.UID || p.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatalf("the low-priority pod was not preempted: %v", err)
	}
}

// holdCPU makes sure node reports cpu allocatable: kwok's first status
// write for a new node can land after controlplane.CreateNode's and give
// it kwok's default of 1000 cores.
func holdCPU(t *testing.T, client kubernetes.Interface, node, cpu string) {
	t.Helper()
	ctx := context.Background()
	want := k8sresource.MustParse(cpu)
	err := waitFor(30*time.Second, func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		kwok := strings.HasPrefix(n.Status.NodeInfo.KubeletVersion, "kwok")
		if got := n.Status.Allocatable[corev1.ResourceCPU]; got.Cmp(want) == 0 {
			return kwok, nil
		}
		if kwok {
			n.Status.Capacity[corev1.ResourceCPU], n.Status.Allocatable[corev1.ResourceCPU] = want, want
			_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				err = nil
			}
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("node %s does not keep %s CPUs: %v", node, cpu, err)
	}
}
