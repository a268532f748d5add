package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/plugin"
)

// TestForgedRecords: a tenant who may create and edit pods in its own
// namespace (the "edit" role), but is not gpushare's scheduler, tries to
// book or take GPUs with hand-written allocation records. With
// deploy/allocation-policy.yaml every such write is refused; without it
// each is reported on its pod, the record of a pod that is not bound
// books nothing, a rewrite of a bound pod's record is refused, and the
// record of a pod pinned to the node books what it names (fail closed:
// the node daemon gives its container nothing, and nothing else lands
// there); no GPU is ever booked twice.
func TestForgedRecords(t *testing.T) {
	t.Parallel()
	for _, policy := range []bool{true, false} {
		t.Run(fmt.Sprintf("policy=%v", policy), func(t *testing.T) { forgedRecords(t, policy) })
	}
}

func forgedRecords(t *testing.T, policy bool) {
	c, admin, sched := startPlugin(t, nil)
	ctx := context.Background()
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 15360, Count: 2})
	if policy {
		if err := controlplane.ApplyAllocationPolicy(ctx, admin, readFile(t, "deploy/allocation-policy.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	tenant := tenantClient(t, c, admin, "tenant")
	refused := func(err error, what string) {
		t.Helper()
		if !policy {
			if err != nil {
				t.Fatalf("%s without the policy: %v", what, err)
			}
			return
		}
		if err == nil || !strings.Contains(err.Error(), "only gpushare's scheduler may set gpushare.io/allocation") {
			t.Fatalf("%s: %v, want it refused by the allocation policy", what, err)
		}
	}
	full := func(gpu int) string {
		return fmt.Sprintf(`{"apiVersion":"gpushare.io/v1alpha1","kind":"Allocation","node":"gpu-a","containers":[`+
			`{"name":"main","kind":"App","gpus":[{"index":%d,"uuid":"GPU-gpu-a-%d","memoryMiB":15360,"compute":0}]}]}`, gpu, gpu)
	}

	// 1. A pod that is never scheduled and asks for no GPU books both GPUs.
	squatter := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "squatter", Namespace: "tenant",
			Annotations: map[string]string{gpusharev1.AllocationAnnotation: full(0)}},
		Spec: corev1.PodSpec{SchedulerName: "no-such-scheduler", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	_, err := tenant.CoreV1().Pods("tenant").Create(ctx, squatter, metav1.CreateOptions{})
	refused(err, "creating an unscheduled pod with a record")

	// 2. A pod pinned with spec.nodeName that asks 1024 MiB and records a
	// whole GPU.
	taker := gpuPod("taker", 1024, 0)
	taker.Namespace = "tenant"
	taker.Spec.NodeName = "gpu-a"
	taker.Annotations = map[string]string{gpusharev1.AllocationAnnotation: full(1)}
	_, err = tenant.CoreV1().Pods("tenant").Create(ctx, taker, metav1.CreateOptions{})
	refused(err, "creating a pod on a node with a record")

	// Pods through gpushare-scheduler get the GPUs no record holds: two
	// of 15360 MiB, one on each GPU, under the policy. Without it the
	// taker's record, bound to the node, holds GPU 1 as it stands (fail
	// closed: its pod runs), and the second honest pod waits.
	for _, name := range []string{"honest-0", "honest-1"} {
		p := gpuPod(name, 15360, 0)
		p.Namespace = "tenant"
		if _, err := tenant.CoreV1().Pods("tenant").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if policy || name == "honest-0" {
			record(t, boundPod(t, tenant, "tenant", name))
		}
	}
	if !policy {
		failedSchedulingMessage(t, admin, "tenant", "honest-1", "")
	}
	honest := boundPod(t, tenant, "tenant", "honest-0")
	if i := record(t, honest).Containers[0].GPUs[0].Index; !policy && i != 0 {
		t.Fatalf("honest-0 on GPU %d; want GPU 0, the one the taker's record does not hold", i)
	}

	// 3. The tenant moves a running pod's booking to the other GPU.
	a := record(t, honest)
	other := 1 - a.Containers[0].GPUs[0].Index
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, gpusharev1.AllocationAnnotation, full(other))
	_, err = tenant.CoreV1().Pods("tenant").Patch(ctx, "honest-0", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	refused(err, "changing a running pod's record")
	// ... or removes it.
	_, err = tenant.CoreV1().Pods("tenant").Patch(ctx, "honest-0", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/metadata/annotations/gpushare.io~1allocation"}]`), metav1.PatchOptions{})
	refused(err, "removing a running pod's record")

	if !policy {
		// Each forged record is reported on its pod. The squatter's
		// books nothing (its pod is not bound), the rewrite of
		// honest-0's is refused (it keeps its first record), and the
		// taker's books what it names: the scheduler's metrics show
		// each GPU booked once.
		for _, pod := range []struct{ name, reason, why string }{
			{"squatter", plugin.ReasonRecordRefused, "not bound to a node"},
			{"taker", plugin.ReasonRecordUnconforming, "books 15360 MiB and 0% compute, the container asks for 1024 MiB"},
			{"honest-0", plugin.ReasonRecordRefused, "allocation record changed after the pod was bound"},
		} {
			eventNote(t, admin, "tenant", pod.name, pod.reason, pod.why)
		}
		waitBooked(t, sched, "gpu-a", []float64{15360, 15360})
		return
	}
	// Under the policy the records are the scheduler's own, and never
	// over-commit.
	checkNoOvercommit(t, admin)
}

// tenantClient returns a client for a service account of namespace ns
// bound to the "edit" role there (ns is created unless it exists): it
// may create and edit pods in ns, nothing cluster-wide.
func tenantClient(t *testing.T, c *controlplane.Cluster, admin kubernetes.Interface, ns string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "tenant", Namespace: ns}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expiry := int64(3600)
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "tenant",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: c.Host, BearerToken: tok.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	// The edit role reaches the tenant once RBAC has seen the binding.
	err = waitFor(30*time.Second, func() (bool, error) {
		_, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the tenant cannot list its pods: %v", err)
	}
	return client
}

// waitBooked waits until the scheduler's booked-memory metric for each
// GPU of node is mib[i] MiB.
func waitBooked(t *testing.T, s *controlplane.Scheduler, node string, mib []float64) {
	t.Helper()
	var got []float64
	err := waitFor(30*time.Second, func() (bool, error) {
		families := scrape(t, s.URL+"/metrics")
		got = got[:0]
		for i := range mib {
			v, err := metricSum(families, "gpushare_gpu_memory_booked_bytes", map[string]string{"node": node, "gpu": fmt.Sprint(i)})
			if err != nil {
				return false, nil //nolint:nilerr // not exported yet
			}
			got = append(got, v/(1<<20))
		}
		return fmt.Sprint(got) == fmt.Sprint(mib), nil
	})
	if err != nil {
		t.Fatalf("booked MiB on %s's GPUs: %v, want %v", node, got, mib)
	}
}

// TestWithdrawnGPUsStayBooked: someone publishes an inventory with more
// GPUs than the node has, a pod is bound to GPUs real and fake, then the
// real inventory returns (as when a GPU is lost and the driver renumbers
// the rest). The pod's bookings are held by GPU UUID: its real GPUs stay
// booked, and no new pod is placed on them.
func TestWithdrawnGPUsStayBooked(t *testing.T) {
	t.Parallel()
	_, client, sched := startPlugin(t, nil)
	ctx := context.Background()
	node := controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 15360, Count: 2}
	createNodes(t, client, node)
	setInventory := func(count int) {
		t.Helper()
		spec := node
		spec.Count = count
		value, err := gpusharev1.Marshal(spec.Inventory())
		if err != nil {
			t.Fatal(err)
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, gpusharev1.InventoryAnnotation, value)
		if _, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setInventory(4)
	// The scheduler has the four GPUs once a pod that needs them fits.
	greedy := gpuPod("greedy", 0, 0)
	greedy.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-core": *k8sresource.NewQuantity(400, k8sresource.DecimalSI)}
	if _, err := client.CoreV1().Pods("default").Create(ctx, greedy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := len(record(t, boundPod(t, client, "default", "greedy")).Containers[0].GPUs); got != 4 {
		t.Fatalf("greedy got %d GPUs, want 4", got)
	}
	setInventory(2)
	// Wait until the scheduler has seen the real inventory: the GPUs it
	// lost show as vanished, still booked by greedy.
	err := waitFor(30*time.Second, func() (bool, error) {
		v, err := metricSum(scrape(t, sched.URL+"/metrics"), "gpushare_gpu_memory_booked_bytes", map[string]string{"node": "gpu-a"})
		if err != nil {
			return false, nil //nolint:nilerr // not exported yet
		}
		caps := scrape(t, sched.URL+"/metrics")["gpushare_gpu_memory_capacity_bytes"]
		vanished := 0
		for _, m := range caps.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" && l.GetValue() == gpucache.VanishedModel {
					vanished++
				}
			}
		}
		return vanished == 2 && v == 4*15360*(1<<20), nil
	})
	if err != nil {
		t.Fatalf("the scheduler does not hold greedy's GPUs after the inventory shrank: %v", err)
	}
	whole := gpuPod("whole", 0, 0)
	whole.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-core": *k8sresource.NewQuantity(100, k8sresource.DecimalSI)}
	if _, err := client.CoreV1().Pods("default").Create(ctx, whole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, client, "default", "whole", "GPUNotIdle")
	if p, err := client.CoreV1().Pods("default").Get(ctx, "whole", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("pod whole was placed on a GPU that greedy holds: %v %v", p.Spec.NodeName, err)
	}
}

// TestEditedRequest: a tenant edits the annotation that shaped its running
// pod's request (here the GPU models it accepts, which the GPU it holds
// no longer matches). With deploy/allocation-policy.yaml the edit is
// refused, with the reason. Without it the edit lands, and a restarted
// scheduler still books the pod's GPU (its record keeps the request it
// was made for): a new pod that needs that GPU stays Pending, the edited
// pod gets an event, and the metrics count it. So does a standby that
// had the pod booked before the edit and takes the lead after it.
func TestEditedRequest(t *testing.T) {
	t.Parallel()
	for _, policy := range []bool{true, false} {
		t.Run(fmt.Sprintf("policy=%v", policy), func(t *testing.T) { editedRequest(t, policy) })
	}
}

func editedRequest(t *testing.T, policy bool) {
	config := readFile(t, "deploy/scheduler-config.yaml")
	c, admin, sched := startPlugin(t, config)
	ctx := context.Background()
	createNodes(t, admin, controlplane.NodeSpec{Name: "t4", Model: "Tesla T4", MemoryMiB: 15360, Count: 1})
	if policy {
		if err := controlplane.ApplyAllocationPolicy(ctx, admin, readFile(t, "deploy/allocation-policy.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	tenant := tenantClient(t, c, admin, "tenant")
	p := gpuPod("mine", 10240, 0)
	p.Namespace = "tenant"
	p.Annotations = map[string]string{"gpushare.io/gpu-models": "Tesla T4"}
	if _, err := tenant.CoreV1().Pods("tenant").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if a := record(t, boundPod(t, tenant, "tenant", "mine")); a.Asked == nil || a.Asked.Annotations["gpushare.io/gpu-models"] != "Tesla T4" {
		t.Fatalf("the record keeps %+v of what the pod asked, want its models annotation", a.Asked)
	}
	// A standby replica, its cache built, waiting for the lease.
	standby, err := c.StartSchedulerAs(ctx, "gpushare-scheduler-standby", schedulerBin, accountKubeconfig(t, c, "scheduler"), config)
	if err != nil {
		t.Fatal(err)
	}
	waitBooked(t, standby, "t4", []float64{10240})

	patch := `{"metadata":{"annotations":{"gpushare.io/gpu-models":"NVIDIA A100-SXM4-80GB"}}}`
	_, err = tenant.CoreV1().Pods("tenant").Patch(ctx, "mine", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if policy {
		if err == nil || !strings.Contains(err.Error(), "gpushare.io/gpu-models shapes the pod's GPU request and cannot change once the pod is bound") {
			t.Fatalf("editing a bound pod's models: %v, want it refused by the allocation policy", err)
		}
		// Before binding the annotation is the tenant's to change.
		q := gpuPod("unbound", 1024, 0)
		q.Namespace, q.Spec.SchedulerName = "tenant", "no-such-scheduler"
		if _, err := tenant.CoreV1().Pods("tenant").Create(ctx, q, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := tenant.CoreV1().Pods("tenant").Patch(ctx, "unbound", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("editing an unbound pod's models: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("editing the models without the policy: %v", err)
	}
	waitEdited(t, standby, 1)

	// Failover: the standby, which booked the pod before the edit, leads.
	sched.Stop(10 * time.Second)
	waitBooked(t, standby, "t4", []float64{10240})
	q := gpuPod("next", 10240, 0)
	if _, err := admin.CoreV1().Pods("default").Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, admin, "default", "next", "largest free share on any GPU is 5120 MiB, pod needs 10240 MiB")

	// Restart: a new scheduler meets the pod edited.
	standby.Stop(10 * time.Second)
	next, err := c.StartSchedulerAs(ctx, "gpushare-scheduler-3", schedulerBin, accountKubeconfig(t, c, "scheduler"), config)
	if err != nil {
		t.Fatal(err)
	}
	eventNote(t, admin, "tenant", "mine", plugin.ReasonRequestEdited, "gpushare.io/gpu-models")
	waitBooked(t, next, "t4", []float64{10240})
	waitEdited(t, next, 1)
	q = gpuPod("after-restart", 10240, 0)
	if _, err := admin.CoreV1().Pods("default").Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, admin, "default", "after-restart", "largest free share on any GPU is 5120 MiB, pod needs 10240 MiB")
	checkNoOvercommit(t, admin)
}

// waitEdited waits until the scheduler counts n pods whose request was
// edited after binding.
func waitEdited(t *testing.T, s *controlplane.Scheduler, n float64) {
	t.Helper()
	var got float64
	err := waitFor(30*time.Second, func() (bool, error) {
		v, err := metricSum(scrape(t, s.URL+"/metrics"), "gpushare_pods_request_edited", nil)
		got = v
		return err == nil && v == n, nil
	})
	if err != nil {
		t.Fatalf("gpushare_pods_request_edited = %v, want %v", got, n)
	}
}
