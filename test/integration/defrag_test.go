package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/defrag"
)

// scatteredShares makes the cluster of the defragmentation tests: gpu-a
// and gpu-b, one 16 GiB T4 each; on gpu-a the running pod of Deployment
// web/web (8 GiB, in namespace web, which opts in to moves), on gpu-b pod
// default/db (4 GiB, no controller, held there by its affinity). It
// returns web's pod and db's UID.
func scatteredShares(t *testing.T, admin kubernetes.Interface) (corev1.Pod, types.UID) {
	t.Helper()
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
	waitRunning(t, admin, "web", web.Name)
	// gpu-b joins; a pod of no controller holds a quarter of its GPU.
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-b", Model: "Tesla T4", MemoryMiB: 16384, Count: 1})
	db := gpuPod("db", 4096, 0)
	db.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu-b"}}}}}}}}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, db, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dbUID := boundPod(t, admin, "default", "db").UID
	// Both pods run before anyone waits for room: a pod still starting
	// is counted as one that cannot move for that reason alone.
	waitRunning(t, admin, "default", "db")
	return web, dbUID
}

// TestInspectDefrag: an operator asks what would move for a whole-GPU pod
// that waits while two half-used GPUs sit on two nodes. The Deployment's
// pod, in a namespace that opts in, would move to the other node; the pod
// without a controller would not; and nothing moves.
func TestInspectDefrag(t *testing.T) {
	t.Parallel()
	c, admin, _ := startPlugin(t, nil)
	ctx := context.Background()
	web, _ := scatteredShares(t, admin)
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

// defragConfig is deploy/scheduler-config.yaml with defragmentation on.
func defragConfig(t *testing.T) []byte {
	t.Helper()
	// spread: left to the policy, a replacement would take the emptiest
	// GPU, the one emptied for the waiting pod; its held place keeps it out.
	return schedulerConfigWith(t, "spread\n${1}defrag: {enabled: true, timeout: 60s}")
}

// grantEviction gives gpushare-scheduler's service account what the chart
// adds with gpushare.defrag.enabled (TestChartDefragRBAC renders it).
func grantEviction(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gpushare-scheduler-defrag"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}}}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpushare-scheduler-defrag"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "gpushare-scheduler", Namespace: "kube-system"}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// watchRecords checks every second, until the test ends, that no GPU is
// over-committed by the pods' records, on a client of its own (a shared
// one's rate limit would skip checks), and returns a func that fails the
// test unless about one check a second ran.
func watchRecords(t *testing.T, c *controlplane.Cluster) func() {
	t.Helper()
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	checks := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, _, err := rebuildFromRecords(client); err != nil {
				if ctx.Err() == nil {
					t.Errorf("records: %v", err)
				}
				continue
			}
			mu.Lock()
			checks++
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if want := int(time.Since(start).Seconds()) * 2 / 3; checks < want {
			t.Errorf("the records were checked %d times in %v, want one a second", checks, time.Since(start).Round(time.Second))
		}
	}
}

// TestDefragMoves: a whole-GPU pod waits while two T4s hold 8 GiB (a
// Deployment's pod, in a namespace that opts in to moves) and 4 GiB (a
// bare pod). While a PodDisruptionBudget forbids moving the Deployment's
// pod, the waiting pod is told so and nothing moves; nor does anything
// move for a pod whose nodeSelector matches no node. Without the budget,
// gpushare-scheduler moves that pod: evicted, its replacement lands on the
// other GPU, where its place was held, and the waiting pod binds to the
// GPU emptied for it. The records never over-commit a GPU meanwhile
// (checked every second), and each pod involved has its events.
func TestDefragMoves(t *testing.T) {
	c, admin, _ := startPlugin(t, defragConfig(t))
	grantEviction(t, admin)
	ctx := context.Background()
	web, dbUID := scatteredShares(t, admin)
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	checked := watchRecords(t, c)

	// A budget that allows no disruption of web's pods.
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: selector}}
	if _, err := admin.PolicyV1().PodDisruptionBudgets("web").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(30*time.Second, func() (bool, error) {
		b, err := admin.PolicyV1().PodDisruptionBudgets("web").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.ExpectedPods == 1, nil
	}); err != nil {
		t.Fatalf("the disruption budget's status: %v", err)
	}
	wholeGPU := func(name string) *corev1.Pod {
		p := gpuPod(name, 0, 0)
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-count": k8sresource.MustParse("1")}
		if _, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wholeGPU("big")
	t.Logf("with the budget: %s", failedSchedulingMessage(t, admin, "default", "big",
		"defragmentation: no pod may move (1 a disruption budget forbids it, 1 not opted in): PodDisruptionBudget web/web allows 0 disruptions"))
	if p, err := admin.CoreV1().Pods("web").Get(ctx, web.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("web's pod under its budget: %v, deleting %v", err, p.DeletionTimestamp)
	}

	// The budget goes; a new whole-GPU pod comes.
	if err := admin.PolicyV1().PodDisruptionBudgets("web").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Pods("default").Delete(ctx, "big", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	// A pod that may run on no node (its nodeSelector matches none)
	// makes nothing move: room is made only where the waiting pod may
	// run (13000 MiB fits no GPU as they are; moving web would make room
	// on gpu-a).
	nowhere := gpuPod("nowhere", 13000, 0)
	nowhere.Spec.NodeSelector = map[string]string{"example.com/no-such-node": "true"}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, nowhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("a pod for no node: %s", failedSchedulingMessage(t, admin, "default", "nowhere", "defragmentation: no plan"))
	if p, err := admin.CoreV1().Pods("web").Get(ctx, web.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("web's pod after a pod for no node waited: %v, deleting %v", err, p.DeletionTimestamp)
	}
	if err := admin.CoreV1().Pods("default").Delete(ctx, "nowhere", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	wholeGPU("big2")
	t.Logf("planned: %s", eventNote(t, admin, "default", "big2", "Defragmenting",
		"Moving 1 pod(s) to make room on node gpu-a (GPU 0): web/"+web.Name+" to node gpu-b (GPU 0)"))
	t.Logf("moved: %s", eventNote(t, admin, "web", web.Name, "MovedByDefrag", "to make room for default/big2 on node gpu-a"))
	big := boundPod(t, admin, "default", "big2")
	if a := record(t, big); a.Node != "gpu-a" || len(a.Containers) != 1 || len(a.Containers[0].GPUs) != 1 || a.Containers[0].GPUs[0].Index != 0 {
		t.Errorf("big2 recorded %s, want GPU 0 of gpu-a", describeAllocation(a))
	}
	t.Logf("done: %s", eventNote(t, admin, "default", "big2", "Defragmented", "Placed on node gpu-a (GPU 0) after moving 1 pod(s)"))

	// The replacement runs on gpu-b; db was not touched.
	var moved corev1.Pod
	if err := waitFor(60*time.Second, func() (bool, error) {
		list, err := admin.CoreV1().Pods("web").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, nil
		}
		for _, p := range list.Items {
			if p.UID != web.UID && p.Status.Phase == corev1.PodRunning {
				moved = p
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("web's replacement never ran: %v", err)
	}
	if a := record(t, &moved); a.Node != "gpu-b" {
		t.Errorf("web's replacement %s recorded %s, want gpu-b, where its place was held", moved.Name, describeAllocation(a))
	}
	if p, err := admin.CoreV1().Pods("default").Get(ctx, "db", metav1.GetOptions{}); err != nil || p.UID != dbUID || p.DeletionTimestamp != nil {
		t.Errorf("db after the moves: %v", err)
	}
	if n, mib := checkNoOvercommit(t, admin); n != 3 || mib != 16384+8192+4096 {
		t.Errorf("%d pods book %d MiB, want big2, db and web's replacement: 3 and %d", n, mib, 16384+8192+4096)
	}
	checked()
}
