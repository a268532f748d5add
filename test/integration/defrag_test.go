package integration

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/defrag"
)

// TestInspectDefrag: an operator asks what would move for a whole-GPU pod
// that waits while two half-used GPUs sit on two nodes. The Deployment's
// pod, in a namespace that opts in, would move to the other node; the pod
// without a controller would not; and nothing moves.
func TestInspectDefrag(t *testing.T) {
	c, admin, _ := startPlugin(t, nil)
	ctx := context.Background()
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 16384, Count: 1})
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web",
		Labels: map[string]string{defrag.OptIn: "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tmpl := gpuPod("web", 8192, 0)
	tmpl.Labels = map[string]string{"app": "web"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "web"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}}}
	dep.Spec.Template.Namespace = ""
	if _, err := admin.AppsV1().Deployments("web").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := boundPods(t, admin, "web", "app=web", 1)[0]
	// gpu-b joins; a pod of no controller holds a quarter of its GPU.
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-b", Model: "Tesla T4", MemoryMiB: 16384, Count: 1})
	db := gpuPod("db", 4096, 0)
	db.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu-b"}}}}}}}}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, db, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	boundPod(t, admin, "default", "db")
	big := gpuPod("big", 0, 0)
	big.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-count": k8sresource.MustParse("1")}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, admin, "default", "big", "GPUNotIdle")

	out := string(inspectCmd(t, c.Kubeconfig, "defrag"))
	want := "default/big  0         move 1 pod(s), 8 GiB: web/" + web.Name + " from gpu-a (GPU 0) to gpu-b (GPU 0); then on gpu-a (GPU 0)"
	if !strings.Contains(out, want) {
		t.Errorf("kubectl inspect gpushare defrag:\n%s\nwant a line %q", out, want)
	}
	// A dry run: the pod is where it was, the waiting pod still waits.
	if p, err := admin.CoreV1().Pods("web").Get(ctx, web.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "gpu-a" || p.DeletionTimestamp != nil {
		t.Errorf("web's pod after the dry run: %v on %q", err, p.Spec.NodeName)
	}
	// Without the namespace's opt-in nothing may move, and it says why.
	ns, err := admin.CoreV1().Namespaces().Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(ns.Labels, defrag.OptIn)
	if _, err := admin.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out = string(inspectCmd(t, c.Kubeconfig, "defrag", "-o", "json"))
	if !strings.Contains(out, `"reason": "no pod may move (2 not opted in)`) {
		t.Errorf("without opt-in:\n%s", out)
	}
}
