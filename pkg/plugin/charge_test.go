package plugin_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/quota"
)

func gpuClaim(name string, mib int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: claim.Class, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{
					claim.Memory: *k8sresource.NewQuantity(mib<<20, k8sresource.BinarySI)}}}}}}}}
}

// TestPluginChargeCovers: a pod that carries a GPU quota charge
// (gpushare-webhook's) is refused, with both figures, once the claim it
// names asks more than it was charged: a tenant who deletes a claim and
// creates it again larger while the pod waits does not escape the quota.
// A pod charged what it asks, or charged nothing, is not.
func TestPluginChargeCovers(t *testing.T) {
	c := newCluster(t)
	if _, err := c.client.ResourceV1().ResourceClaims("default").Create(c.ctx, gpuClaim("c", 4096), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fw := c.profile("default-scheduler")
	c.start()
	claimPod := func(name string, chargedMiB int64, charged bool) *corev1.Pod {
		p := gpuPod(name, "default-scheduler", 0)
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		if charged {
			r := corev1.ResourceList{quota.MemoryResource: *k8sresource.NewQuantity(chargedMiB<<20, k8sresource.BinarySI),
				quota.ComputeResource: *k8sresource.NewQuantity(0, k8sresource.DecimalSI)}
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: r, Limits: r}
		}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("c")}}
		return p
	}
	preFilter := func(p *corev1.Pod) *fwk.Status {
		_, s, _ := fw.RunPreFilterPlugins(c.ctx, framework.NewCycleState(), p)
		return s
	}
	if s := preFilter(claimPod("fair", 4096, true)); strings.Contains(s.Message(), "charged") {
		t.Errorf("a pod charged what its claim asks: %v", s)
	}
	if s := preFilter(claimPod("more", 8192, true)); strings.Contains(s.Message(), "charged") {
		t.Errorf("a pod charged more than its claim asks: %v", s)
	}

	// The claim is created again, asking twice as much.
	if err := c.client.ResourceV1().ResourceClaims("default").Delete(c.ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.ResourceV1().ResourceClaims("default").Create(c.ctx, gpuClaim("c", 8192), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const want = "gpushare: the pod was charged 4096 MiB of GPU memory and 0 percent of a GPU's compute to its namespace's GPU quota when it was created, " +
		"but asks 8192 MiB of GPU memory and 0 percent of a GPU's compute now"
	var s *fwk.Status
	deadline := time.Now().Add(10 * time.Second)
	for {
		s = preFilter(claimPod("fair", 4096, true))
		if s.Code() == fwk.UnschedulableAndUnresolvable || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(s.Message(), want) {
		t.Errorf("a pod charged 4096 MiB whose claim now asks 8192: %v, want UnschedulableAndUnresolvable %q", s, want)
	}
	if s := preFilter(claimPod("more", 8192, true)); strings.Contains(s.Message(), "charged") {
		t.Errorf("a pod charged what the new claim asks: %v", s)
	}
	if s := preFilter(claimPod("uncharged", 0, false)); strings.Contains(s.Message(), "charged") {
		t.Errorf("a pod that carries no charge: %v", s)
	}
}
