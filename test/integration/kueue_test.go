package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

var workloadsResource = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}

// kueueJob is a Job of the queue "gpus" of n pods at once of gpu-scheduler,
// each asking mib MiB of one GPU. It is created unsuspended, as a user
// writes it: Kueue's webhook suspends it until Kueue admits it.
func kueueJob(ns, name string, n int32, mib int64) *batchv1.Job {
	res := corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(mib, k8sresource.DecimalSI)}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "gpus"}},
		Spec: batchv1.JobSpec{Parallelism: ptr.To(n), Completions: ptr.To(n),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": name}},
				Spec: corev1.PodSpec{SchedulerName: "gpu-scheduler", RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: "busybox", Command: []string{"sleep", "infinity"},
						Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}}}}},
	}
}

// jobPods returns the job's pods that are not being deleted, and how many
// of them are bound.
func jobPods(t *testing.T, admin kubernetes.Interface, ns, job string) (pods, bound int) {
	t.Helper()
	list, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job=" + job})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		pods++
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	return pods, bound
}

// jobWorkloads returns the Kueue Workloads the job owns.
func jobWorkloads(t *testing.T, dyn dynamic.Interface, ns, job string) []unstructured.Unstructured {
	t.Helper()
	list, err := dyn.Resource(workloadsResource).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []unstructured.Unstructured
	for _, w := range list.Items {
		if owners := w.GetOwnerReferences(); len(owners) > 0 && owners[0].Name == job {
			out = append(out, w)
		}
	}
	return out
}

// workloadCondition returns the status and reason of condition of the
// Kueue Workload of the job ("" if none yet).
func workloadCondition(t *testing.T, dyn dynamic.Interface, ns, job, condition string) (status, reason, message string) {
	t.Helper()
	for _, w := range jobWorkloads(t, dyn, ns, job) {
		conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == condition {
				return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"]), fmt.Sprint(m["message"])
			}
		}
	}
	return "", "", ""
}

// workloadUsage returns the resources Kueue charged the job's admitted
// Workload, summed over its pod sets.
func workloadUsage(t *testing.T, dyn dynamic.Interface, ns, job string) map[string]string {
	t.Helper()
	usage := map[string]string{}
	for _, w := range jobWorkloads(t, dyn, ns, job) {
		sets, _, _ := unstructured.NestedSlice(w.Object, "status", "admission", "podSetAssignments")
		for _, set := range sets {
			m, _ := set.(map[string]any)
			res, _ := m["resourceUsage"].(map[string]any)
			for name, q := range res {
				usage[name] = fmt.Sprint(q)
			}
		}
	}
	return usage
}

// TestKueue runs a real Kueue (hack/kueue.sh) with gpushare-scheduler and
// examples/teams/kueue-queues.yaml: two teams' ClusterQueues of 32 GiB of GPU
// memory each, in one cohort, on two nodes of two 16 GiB T4s (64 GiB).
//   - research's Job of six 8 GiB pods is admitted by borrowing 16 GiB
//     product leaves idle, and gpushare-scheduler places the six, two to a
//     GPU;
//   - product's Job of four 8 GiB pods reclaims its quota: Kueue preempts
//     research's Job, whose pods go; product's four bind; research's Job
//     waits, suspended, for quota;
//   - a Job whose 20 GiB pod fits the quota but no GPU is admitted, and its
//     pod waits with gpushare's reason in its event;
//   - a Job in Aliyun's dialect (GiB) is charged in gpushare's MiB, through
//     examples/teams/kueue-resources.yaml.
//
// A watcher checks every second that no GPU is over-committed.
func TestKueue(t *testing.T) {
	dir := os.Getenv("GPUSHARE_KUEUE")
	if dir == "" {
		if os.Getenv("GPUSHARE_REQUIRE_CLUSTER") == "1" {
			t.Fatal("GPUSHARE_KUEUE is not set: run the test through make")
		}
		t.Skip("GPUSHARE_KUEUE is not set (make kueue builds it)")
	}
	c, admin, _ := startPluginWith(t, controlplane.Options{JobPodsRun: true}, nil)
	ctx := context.Background()
	if _, err := c.StartKueue(ctx, dir, readFile(t, "examples/teams/kueue-resources.yaml")); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	createNodes(t, admin,
		controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 16384, Count: 2},
		controlplane.NodeSpec{Name: "gpu-b", Model: "Tesla T4", MemoryMiB: 16384, Count: 2})
	checked := watchRecords(t, c)
	if out, err := exec.Command(tools.Bin("kubectl"), "--kubeconfig="+c.Kubeconfig, "apply", "-f", "../../examples/teams/kueue-queues.yaml").CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -f examples/teams/kueue-queues.yaml: %v\n%s", err, out)
	}

	// research borrows: 48 GiB against its 32.
	if _, err := admin.BatchV1().Jobs("research").Create(ctx, kueueJob("research", "sweep", 6, 8192), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(90*time.Second, func() (bool, error) {
		_, bound := jobPods(t, admin, "research", "sweep")
		return bound == 6, nil
	}); err != nil {
		status, reason, msg := workloadCondition(t, dyn, "research", "sweep", "QuotaReserved")
		t.Fatalf("research's six pods were not all bound: its workload's QuotaReserved is %s (%s: %s)", status, reason, msg)
	}
	if n, mib := checkNoOvercommit(t, admin); n != 6 || mib != 6*8192 {
		t.Errorf("%d pods book %d MiB, want research's 6 and %d", n, mib, 6*8192)
	}

	// product asks its own 32 GiB back.
	if _, err := admin.BatchV1().Jobs("product").Create(ctx, kueueJob("product", "serve", 4, 8192), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(120*time.Second, func() (bool, error) {
		_, bound := jobPods(t, admin, "product", "serve")
		return bound == 4, nil
	}); err != nil {
		status, reason, msg := workloadCondition(t, dyn, "product", "serve", "QuotaReserved")
		t.Fatalf("product's four pods were not all bound: its workload's QuotaReserved is %s (%s: %s)", status, reason, msg)
	}
	status, reason, msg := workloadCondition(t, dyn, "research", "sweep", "Preempted")
	t.Logf("research's workload: Preempted %s (%s: %s)", status, reason, msg)
	if status != "True" || reason != "InCohortReclamation" {
		t.Errorf("research's workload Preempted %s, reason %s, want True and InCohortReclamation", status, reason)
	}
	if err := waitFor(60*time.Second, func() (bool, error) {
		pods, _ := jobPods(t, admin, "research", "sweep")
		return pods == 0, nil
	}); err != nil {
		t.Errorf("research's pods stayed after it was preempted")
	}
	job, err := admin.BatchV1().Jobs("research").Get(ctx, "sweep", metav1.GetOptions{})
	if err != nil || !ptr.Deref(job.Spec.Suspend, false) {
		t.Errorf("research's Job after it was preempted: suspended %v, %v; want suspended", job.Spec.Suspend, err)
	}
	if n, mib := checkNoOvercommit(t, admin); n != 4 || mib != 4*8192 {
		t.Errorf("%d pods book %d MiB, want product's 4 and %d", n, mib, 4*8192)
	}
	status, reason, msg = workloadCondition(t, dyn, "research", "sweep", "QuotaReserved")
	t.Logf("research's workload waits: QuotaReserved %s (%s: %s)", status, reason, msg)
	if status != "False" {
		t.Errorf("research's workload holds quota again (%s) while product uses its own", status)
	}

	// Within product's quota but larger than any GPU: admitted, and the
	// pod says why it waits.
	if _, err := admin.BatchV1().Jobs("product").Create(ctx, kueueJob("product", "huge", 1, 20480), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod string
	if err := waitFor(60*time.Second, func() (bool, error) {
		list, err := admin.CoreV1().Pods("product").List(ctx, metav1.ListOptions{LabelSelector: "job=huge"})
		if err != nil || len(list.Items) == 0 {
			return false, nil
		}
		pod = list.Items[0].Name
		return true, nil
	}); err != nil {
		t.Fatalf("Kueue did not start product's 20 GiB Job")
	}
	note := failedSchedulingMessage(t, admin, "product", pod, "is more than the largest GPU holds")
	t.Logf("product's 20 GiB pod: %s", note)
	if !strings.Contains(note, "20480 MiB per GPU") || !strings.Contains(note, "(16384 MiB)") {
		t.Errorf("the 20 GiB pod's event %q does not give the numbers", note)
	}
	if status, _, _ := workloadCondition(t, dyn, "product", "huge", "Admitted"); status != "True" {
		t.Errorf("product's 20 GiB Job's workload Admitted %q, want True: Kueue admits it on quota alone", status)
	}

	// Aliyun's dialect, counted in gpushare's MiB through Kueue's
	// resource transformations: 8 GiB is 8192 of research's quota.
	aliyun := kueueJob("research", "aliyun", 1, 0)
	aliyun.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Limits: corev1.ResourceList{"aliyun.com/gpu-mem": k8sresource.MustParse("8")}}
	if _, err := admin.BatchV1().Jobs("research").Create(ctx, aliyun, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(60*time.Second, func() (bool, error) {
		_, bound := jobPods(t, admin, "research", "aliyun")
		return bound == 1, nil
	}); err != nil {
		status, reason, msg := workloadCondition(t, dyn, "research", "aliyun", "QuotaReserved")
		t.Fatalf("research's Aliyun pod was not bound: its workload's QuotaReserved is %s (%s: %s)", status, reason, msg)
	}
	if usage := workloadUsage(t, dyn, "research", "aliyun"); usage["gpushare.io/gpu-mem"] != "8192" || usage["aliyun.com/gpu-mem"] != "" {
		t.Errorf("research's Aliyun workload is charged %v, want gpushare.io/gpu-mem 8192 alone", usage)
	}
	checked()
}
