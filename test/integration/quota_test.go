package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/inspect"
	"github.com/gpushare/gpushare/pkg/quota"
)

// startWebhook runs gpushare-webhook as its service account and registers
// it with deploy/quota-webhook.yaml's MutatingWebhookConfiguration (the
// chart's), on loopback.
func startWebhook(t *testing.T, c *controlplane.Cluster) *controlplane.Webhook {
	t.Helper()
	p, err := c.StartQuotaWebhook(context.Background(), controlplane.QuotaWebhook{Bin: webhookBin, Kubeconfig: accountKubeconfig(t, c, "webhook"),
		Args: filepath.Join(root, "deploy/extender-config.yaml"), Manifest: readFile(t, "deploy/quota-webhook.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	notForbidden(t, p.Process)
	return p
}

// createQuota creates ResourceQuota ns/gpus with hard and waits until
// its controller has counted it: until then the quota admission plugin
// refuses the namespace's pods.
func createQuota(t *testing.T, admin kubernetes.Interface, ns string, hard corev1.ResourceList) {
	t.Helper()
	ctx := context.Background()
	rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpus", Namespace: ns}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	if _, err := admin.CoreV1().ResourceQuotas(ns).Create(ctx, rq, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(30*time.Second, func() (bool, error) {
		q, err := admin.CoreV1().ResourceQuotas(ns).Get(ctx, "gpus", metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil, nil
	}); err != nil {
		t.Fatal("the quota was never counted")
	}
}

func withLimits(p *corev1.Pod, ns string, limits map[corev1.ResourceName]string) *corev1.Pod {
	p.Namespace = ns
	if limits == nil {
		return p
	}
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{}
	for k, v := range limits {
		p.Spec.Containers[0].Resources.Limits[k] = k8sresource.MustParse(v)
	}
	return p
}

// chargeOf returns the charge written on the pod's first container.
func chargeOf(p *corev1.Pod) quota.Charge {
	var ch quota.Charge
	r := p.Spec.Containers[0].Resources.Requests
	if q, ok := r[quota.MemoryResource]; ok {
		ch.MemoryMiB = q.Value() >> 20
	}
	if q, ok := r[quota.ComputeResource]; ok {
		ch.Compute = q.Value()
	}
	return ch
}

// TestQuota: a namespace's ResourceQuota on gpushare's charged resources
// bounds its GPU memory and compute over every dialect and claims; a
// tenant with the edit role cannot write its own charge, raise its quota
// or change a charge after creation; GPU pods still schedule, and pods
// without GPUs never reach the webhook.
func TestQuota(t *testing.T) {
	t.Parallel()
	c, admin, _ := startPlugin(t, nil)
	ctx := context.Background()
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-0", Model: "Tesla T4", MemoryMiB: 16384, Count: 2})
	webhook := startWebhook(t, c)
	if err := controlplane.ApplyAllocationPolicy(ctx, admin, readFile(t, "deploy/allocation-policy.yaml")); err != nil {
		t.Fatal(err)
	}
	tenant := tenantClient(t, c, admin, "team-a")
	free := tenantClient(t, c, admin, "team-b")
	createQuota(t, admin, "team-a", corev1.ResourceList{
		"requests." + quota.MemoryResource:  k8sresource.MustParse("40Gi"),
		"requests." + quota.ComputeResource: k8sresource.MustParse("150"),
	})
	create := func(cl kubernetes.Interface, p *corev1.Pod) (*corev1.Pod, error) {
		return cl.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	}
	mustCreate := func(cl kubernetes.Interface, p *corev1.Pod, want quota.Charge) *corev1.Pod {
		t.Helper()
		got, err := create(cl, p)
		if err != nil {
			t.Fatalf("creating %s: %v", p.Name, err)
		}
		if ch := chargeOf(got); ch != want {
			t.Errorf("%s charged %+v, want %+v", p.Name, ch, want)
		}
		return got
	}
	refused := func(cl kubernetes.Interface, p *corev1.Pod, want ...string) {
		t.Helper()
		_, err := create(cl, p)
		if err == nil {
			t.Fatalf("%s was created, want it refused (%v)", p.Name, want)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s refused with %q, want it to say %q", p.Name, err, w)
			}
		}
	}

	// The plain case: a pod without GPUs, whatever the webhook.
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "team-a"},
		Spec: corev1.PodSpec{SchedulerName: "gpu-scheduler", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	mustCreate(tenant, plain, quota.Charge{})
	boundPod(t, admin, "team-a", "plain")

	// Each dialect, charged in gpushare's units; the pods still bind.
	mustCreate(tenant, withLimits(gpuPod("mine", 4096, 30), "team-a", nil), quota.Charge{MemoryMiB: 4096, Compute: 30})
	mustCreate(tenant, withLimits(gpuPod("aliyun", 1, 0), "team-a", map[corev1.ResourceName]string{"aliyun.com/gpu-mem": "3"}), quota.Charge{MemoryMiB: 3072})
	// A whole GPU: its memory is the largest GPU's it may take.
	mustCreate(tenant, withLimits(gpuPod("whole", 1, 0), "team-a", map[corev1.ResourceName]string{"gpushare.io/gpu-count": "1"}),
		quota.Charge{MemoryMiB: 16384, Compute: 100})
	for _, name := range []string{"mine", "aliyun", "whole"} {
		boundPod(t, admin, "team-a", name)
	}
	// Used: 23 GiB of 40, 130% of 150.

	// Over the compute quota, in Elastic's dialect: refused with the numbers.
	refused(tenant, withLimits(gpuPod("elastic", 1, 0), "team-a", map[corev1.ResourceName]string{
		"elasticgpu.io/gpu-memory": "2000", "elasticgpu.io/gpu-core": "30"}),
		"exceeded quota: gpus", "requested: requests.gpushare.io/quota-compute=30", "used: requests.gpushare.io/quota-compute=130",
		"limited: requests.gpushare.io/quota-compute=150")
	// A charge written by the tenant is replaced by the pod's own: two
	// containers of 9000 MiB, 18000 in all.
	forged := withLimits(gpuPod("forged", 9000, 0), "team-a", nil)
	forged.Spec.Containers = append(forged.Spec.Containers, *forged.Spec.Containers[0].DeepCopy())
	forged.Spec.Containers[1].Name = "second"
	forged.Spec.Containers[0].Resources.Limits[quota.MemoryResource] = k8sresource.MustParse("1Mi")
	forged.Spec.Containers[0].Resources.Requests = corev1.ResourceList{quota.MemoryResource: k8sresource.MustParse("1Mi")}
	refused(tenant, forged, "exceeded quota: gpus", "requested: requests.gpushare.io/quota-memory=18000Mi", "limited: requests.gpushare.io/quota-memory=40Gi")
	// On an init container, or a second container, too.
	sneaky := withLimits(gpuPod("sneaky", 1000, 0), "team-a", nil)
	sneaky.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{quota.MemoryResource: k8sresource.MustParse("1Mi")}}}}
	sneaky.Spec.Containers = append(sneaky.Spec.Containers, corev1.Container{Name: "side", Image: "busybox", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{quota.ComputeResource: k8sresource.MustParse("1")}}})
	got := mustCreate(tenant, sneaky, quota.Charge{MemoryMiB: 1000})
	boundPod(t, admin, "team-a", "sneaky")
	for _, ctr := range append(got.Spec.InitContainers, got.Spec.Containers[1]) {
		for _, n := range []corev1.ResourceName{quota.MemoryResource, quota.ComputeResource} {
			if _, ok := ctr.Resources.Limits[n]; ok {
				t.Errorf("container %s keeps %s", ctr.Name, n)
			}
		}
	}
	// A claim's memory counts: a template's claim of 20 GiB passes 40.
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "team-a"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: claim.Class, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{claim.Memory: k8sresource.MustParse("20Gi")}}}}}}}}}
	if _, err := tenant.ResourceV1().ResourceClaimTemplates("team-a").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "claims", Namespace: "team-a"}, Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("big")}},
		Containers:     []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}}}
	refused(tenant, claimPod, "exceeded quota: gpus", "requested: requests.gpushare.io/quota-memory=20Gi")
	// A claim not yet created cannot be priced: refused under a quota,
	// with what to do; let through where no quota bounds GPUs.
	missing := claimPod.DeepCopy()
	missing.Name, missing.Spec.ResourceClaims[0].ResourceClaimTemplateName = "missing", ptr.To("nope")
	refused(tenant, missing, "create a pod's claim templates before the pod")
	missing.Namespace = "team-b"
	mustCreate(free, missing, quota.Charge{})

	// The quota's count is the truth: 23 GiB + 1000 MiB, 130%.
	if err := waitFor(30*time.Second, func() (bool, error) {
		q, err := admin.CoreV1().ResourceQuotas("team-a").Get(ctx, "gpus", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mem, cpu := q.Status.Used["requests."+quota.MemoryResource], q.Status.Used["requests."+quota.ComputeResource]
		return mem.Value() == (23*1024+1000)<<20 && cpu.Value() == 130, nil
	}); err != nil {
		t.Error("the quota's used never came to 24552 MiB and 130%")
	}

	// kubectl inspect gpushare quota shows the same use beside what the
	// pods hold of the GPUs: 4096 + 3072 + 16384 + 1000 MiB, 30 + 100%.
	var qs []inspect.Quota
	if err := json.Unmarshal(inspectCmd(t, c.Kubeconfig, "quota", "-o", "json"), &qs); err != nil {
		t.Fatal(err)
	}
	var teamA *inspect.Quota
	for i := range qs {
		if qs[i].Namespace == "team-a" {
			teamA = &qs[i]
		}
	}
	if teamA == nil || teamA.Memory == nil || teamA.Memory.Used != 23*1024+1000 || teamA.Memory.Hard != 40*1024 ||
		teamA.Compute == nil || teamA.Compute.Used != 130 || teamA.BookedMemoryMiB != 23*1024+1000 || teamA.BookedCompute != 130 || len(teamA.Uncharged) != 0 {
		t.Errorf("inspect quota for team-a: %+v", teamA)
	}

	// The tenant cannot raise its quota, nor change a charge once created.
	q, err := tenant.CoreV1().ResourceQuotas("team-a").Get(ctx, "gpus", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Spec.Hard["requests."+quota.MemoryResource] = k8sresource.MustParse("400Gi")
	if _, err := tenant.CoreV1().ResourceQuotas("team-a").Update(ctx, q, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the tenant raised its quota: %v", err)
	}
	whole, err := tenant.CoreV1().Pods("team-a").Get(ctx, "whole", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	whole.Spec.Containers[0].Resources.Requests[quota.MemoryResource] = k8sresource.MustParse("1Mi")
	whole.Spec.Containers[0].Resources.Limits[quota.MemoryResource] = k8sresource.MustParse("1Mi")
	if _, err := tenant.CoreV1().Pods("team-a").Update(ctx, whole, metav1.UpdateOptions{}); err == nil {
		t.Error("the tenant lowered a running pod's charge")
	}

	// Room comes back when a pod goes: the whole GPU's 100% frees the
	// Elastic pod's 30.
	if err := tenant.CoreV1().Pods("team-a").Delete(ctx, "whole", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	elastic := withLimits(gpuPod("elastic", 1, 0), "team-a", map[corev1.ResourceName]string{"elasticgpu.io/gpu-memory": "2000", "elasticgpu.io/gpu-core": "30"})
	if err := waitFor(60*time.Second, func() (bool, error) {
		_, err := create(tenant, elastic.DeepCopy())
		return err == nil, nil
	}); err != nil {
		t.Fatal("the Elastic pod was still refused after the whole GPU's pod was deleted")
	}
	boundPod(t, admin, "team-a", "elastic")

	// A charged pod's request annotations are fixed from its creation,
	// bound or not: its charge was reckoned from them.
	waiting := withLimits(gpuPod("waiting", 1000, 0), "team-a", nil)
	waiting.Annotations = map[string]string{"gpushare.io/gpu-models": "Tesla T4"}
	waiting.Spec.NodeSelector = map[string]string{"pool": "none"}
	mustCreate(tenant, waiting, quota.Charge{MemoryMiB: 1000})
	got, err = tenant.CoreV1().Pods("team-a").Get(ctx, "waiting", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Annotations["gpushare.io/gpu-models"] = "NVIDIA H200"
	_, err = tenant.CoreV1().Pods("team-a").Update(ctx, got, metav1.UpdateOptions{})
	if err == nil || !strings.Contains(err.Error(), "gpushare.io/gpu-models shapes the pod's GPU request and cannot change once the pod is charged to its namespace's GPU quota") {
		t.Errorf("a pending pod's GPU models changed after it was charged: %v", err)
	}
	checkNoOvercommit(t, admin)

	// A claim the tenant creates again larger behind a waiting pod: the
	// pod was charged the small one, and gpushare-scheduler refuses it
	// with both figures rather than place the large one uncharged.
	small := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "swap", Namespace: "team-a"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: claim.Class, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{claim.Memory: k8sresource.MustParse("1Gi")}}}}}}}}
	if err := controlplane.Apply(ctx, admin, readFile(t, "deploy/dra-deviceclass.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.ResourceV1().ResourceClaims("team-a").Create(ctx, small, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	swap := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "swap", Namespace: "team-a"}, Spec: corev1.PodSpec{
		// No node publishes gpushare's DRA devices here: the pod waits.
		SchedulerName:  "gpu-scheduler",
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("swap")}},
		Containers:     []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}}}
	mustCreate(tenant, swap, quota.Charge{MemoryMiB: 1024})
	if err := tenant.ResourceV1().ResourceClaims("team-a").Delete(ctx, "swap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	large := small.DeepCopy()
	large.Spec.Devices.Requests[0].Exactly.Capacity.Requests[claim.Memory] = k8sresource.MustParse("12Gi")
	if _, err := tenant.ResourceV1().ResourceClaims("team-a").Create(ctx, large, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("a claim created again larger: %s", failedSchedulingMessage(t, admin, "team-a", "swap",
		"the pod was charged 1024 MiB of GPU memory and 0 percent of a GPU's compute to its namespace's GPU quota when it was created, but asks 12288 MiB"))

	// With the webhook down, a GPU pod is refused (failurePolicy Fail:
	// none escapes its charge) and a pod with another extended resource
	// is created as usual.
	webhook.Stop(5 * time.Second)
	if _, err := create(tenant, withLimits(gpuPod("down", 100, 0), "team-a", nil)); err == nil || !strings.Contains(err.Error(), "quota.gpushare.io") {
		t.Errorf("a GPU pod while the webhook is down: %v", err)
	}
	other := withLimits(gpuPod("nic", 1, 0), "team-a", map[corev1.ResourceName]string{"example.com/nic": "1"})
	mustCreate(tenant, other, quota.Charge{})
}

// TestQuotaExtender: with stock kube-scheduler and gpushare-extender
// (deploy/extender-scheduler-config.yaml), pods carrying their charge
// still bind, through the extender, and the quota refuses past it.
func TestQuotaExtender(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	admin, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := startSecureExtender(t, c)
	if _, err := c.StartScheduler(ctx, "kube-scheduler", tools.Bin("kube-scheduler"), e.schedulerConfig(t)); err != nil {
		t.Fatal(err)
	}
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-0", Model: "Tesla T4", MemoryMiB: 16384, Count: 2})
	startWebhook(t, c)
	tenant := tenantClient(t, c, admin, "team-a")
	createQuota(t, admin, "team-a", corev1.ResourceList{"requests." + quota.MemoryResource: k8sresource.MustParse("20Gi")})
	for _, p := range []*corev1.Pod{
		withLimits(gpuPod("share", 4096, 0), "team-a", nil),
		withLimits(gpuPod("whole", 1, 0), "team-a", map[corev1.ResourceName]string{"gpushare.io/gpu-count": "1"}),
	} {
		got, err := tenant.CoreV1().Pods("team-a").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating %s: %v", p.Name, err)
		}
		if chargeOf(got).MemoryMiB == 0 {
			t.Errorf("%s carries no charge", p.Name)
		}
		boundPod(t, admin, "team-a", p.Name)
	}
	// 20 GiB used of 20: one more MiB is refused.
	_, err = tenant.CoreV1().Pods("team-a").Create(ctx, withLimits(gpuPod("more", 1, 0), "team-a", nil), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "exceeded quota: gpus") {
		t.Errorf("a pod past the quota: %v", err)
	}
	checkNoOvercommit(t, admin)
}
