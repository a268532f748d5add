package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/quota"
	"github.com/gpushare/gpushare/pkg/resource"
)

type fakeClaims map[string]*resourceapi.ResourceClaim

func (f fakeClaims) Claim(_ context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
	if c, ok := f[ns+"/"+name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
}

func (f fakeClaims) Template(_ context.Context, ns, name string) (*resourceapi.ResourceClaimTemplate, error) {
	if c, ok := f[ns+"/template/"+name]; ok {
		return &resourceapi.ResourceClaimTemplate{Spec: resourceapi.ResourceClaimTemplateSpec{Spec: c.Spec}}, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaimtemplates"), name)
}

func memoryClaim(mib int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: claim.Class, Count: 1,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]apiresource.Quantity{
				claim.Memory: *apiresource.NewQuantity(mib<<20, apiresource.BinarySI)}}}}}}}}
}

func charger(t *testing.T, bounded bool) *Charger {
	t.Helper()
	cfg := v1alpha1.Default()
	cfg.Resources = append(cfg.Resources, v1alpha1.HAMiResources()...)
	model, err := resource.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gpus := []alloc.GPU{{Model: "Tesla T4", MemoryMiB: 15360}, {Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960}}
	return &Charger{Model: model, GPUs: func() []alloc.GPU { return gpus },
		Claims:  fakeClaims{"team-a/c1": memoryClaim(3072), "team-a/template/t1": memoryClaim(5120)},
		Bounded: func(string) bool { return bounded }}
}

func container(name string, res map[string]string) corev1.Container {
	c := corev1.Container{Name: name, Image: "cuda"}
	if len(res) > 0 {
		c.Resources.Limits = corev1.ResourceList{}
		for k, v := range res {
			c.Resources.Limits[corev1.ResourceName(k)] = apiresource.MustParse(v)
		}
	}
	return c
}

func review(t *testing.T, c *Charger, pod *corev1.Pod) (*admissionv1.AdmissionResponse, *corev1.Pod) {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	resp := c.Review(context.Background(), &admissionv1.AdmissionRequest{UID: "u1", Operation: admissionv1.Create, Namespace: "team-a",
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: raw}})
	if resp.UID != "u1" {
		t.Errorf("UID %q, want u1", resp.UID)
	}
	if !resp.Allowed || resp.Patch == nil {
		return resp, pod
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("patch %s: %v", resp.Patch, err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("applying %s: %v", resp.Patch, err)
	}
	var patched corev1.Pod
	if err := json.Unmarshal(out, &patched); err != nil {
		t.Fatal(err)
	}
	return resp, &patched
}

// charged returns what c's requests and limits charge, failing where they
// differ.
func charged(t *testing.T, c *corev1.Container) quota.Charge {
	t.Helper()
	var ch quota.Charge
	for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		var got quota.Charge
		if q, ok := list[quota.MemoryResource]; ok {
			got.MemoryMiB = q.Value() >> 20
		}
		if q, ok := list[quota.ComputeResource]; ok {
			got.Compute = q.Value()
		}
		if ch != (quota.Charge{}) && got != ch {
			t.Errorf("container %s: requests and limits charge differently: %+v, %+v", c.Name, ch, got)
		}
		ch = got
	}
	return ch
}

func TestReviewWritesCharge(t *testing.T) {
	c := charger(t, true)
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want quota.Charge
	}{
		{"gpushare's MiB", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			container("a", map[string]string{"gpushare.io/gpu-mem": "4096", "gpushare.io/gpu-core": "30"})}}}, quota.Charge{MemoryMiB: 4096, Compute: 30}},
		{"Aliyun's GiB", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			container("a", map[string]string{"aliyun.com/gpu-mem": "3"})}}}, quota.Charge{MemoryMiB: 3072}},
		{"Elastic's", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			container("a", map[string]string{"elasticgpu.io/gpu-memory": "2000", "elasticgpu.io/gpu-core": "50"})}}}, quota.Charge{MemoryMiB: 2000, Compute: 50}},
		{"HAMi's per GPU, two GPUs", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			container("a", map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "20"})}}},
			quota.Charge{MemoryMiB: 2000, Compute: 40}},
		{"HAMi's percent, at the largest GPU", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			container("a", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "10"})}}},
			quota.Charge{MemoryMiB: 20480, Compute: 10}},
		{"whole GPUs of a model, at its memory", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"gpushare.io/gpu-models": "Tesla T4"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{container("a", map[string]string{"nvidia.com/gpu": "2"})}}},
			quota.Charge{MemoryMiB: 2 * 15360, Compute: 200}},
		{"containers added up, written on the first app container", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			container("plain", nil), container("b", map[string]string{"gpushare.io/gpu-mem": "1000"}),
			container("c", map[string]string{"gpushare.io/gpu-mem": "500"})}}}, quota.Charge{MemoryMiB: 1500}},
		{"a claim and a claim template", corev1.Pod{Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "x", ResourceClaimName: ptr.To("c1")}, {Name: "y", ResourceClaimTemplateName: ptr.To("t1")}},
			Containers:     []corev1.Container{container("a", nil)}}}, quota.Charge{MemoryMiB: 8192}},
		{"no GPU", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("a", map[string]string{"cpu": "1"})}}}, quota.Charge{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, pod := review(t, c, &tc.pod)
			if !resp.Allowed {
				t.Fatalf("refused: %s", resp.Result.Message)
			}
			if got := charged(t, &pod.Spec.Containers[0]); got != tc.want {
				t.Errorf("charge %+v, want %+v", got, tc.want)
			}
			for i := 1; i < len(pod.Spec.Containers); i++ {
				if got := charged(t, &pod.Spec.Containers[i]); !got.Zero() {
					t.Errorf("container %d charged %+v too", i, got)
				}
			}
			if tc.want.Zero() && resp.Patch != nil {
				t.Errorf("a pod that charges nothing got a patch: %s", resp.Patch)
			}
		})
	}
}

// TestReviewClaimPodSaysZero: a pod of claims carries its charge even
// when its claims ask nothing of gpushare's devices, so that
// gpushare-scheduler can tell a claim replaced by a larger one before the
// pod is scheduled; where its claims cannot be read (no quota bounds the
// namespace) it carries none.
func TestReviewClaimPodSaysZero(t *testing.T) {
	c := charger(t, false)
	c.Claims = fakeClaims{"team-a/other": &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nic.example.com", Count: 1}}}}}}}
	_, pod := review(t, c, &corev1.Pod{Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "x", ResourceClaimName: ptr.To("other")}},
		Containers:     []corev1.Container{container("a", nil)}}})
	for _, list := range []corev1.ResourceList{pod.Spec.Containers[0].Resources.Requests, pod.Spec.Containers[0].Resources.Limits} {
		m, okM := list[quota.MemoryResource]
		cp, okC := list[quota.ComputeResource]
		if !okM || !okC || !m.IsZero() || !cp.IsZero() {
			t.Errorf("a pod of a claim of no GPU: charged %v, want zero memory and compute written", list)
		}
	}
	resp, pod := review(t, c, &corev1.Pod{Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "x", ResourceClaimName: ptr.To("missing")}},
		Containers:     []corev1.Container{container("a", nil)}}})
	if _, ok := pod.Spec.Containers[0].Resources.Requests[quota.MemoryResource]; ok || resp.Patch != nil {
		t.Errorf("a pod whose claim is not created yet, in a namespace of no quota: patched %s", resp.Patch)
	}
}

// TestReviewReplacesForgedCharge: a charge the pod's author wrote is
// replaced by the pod's own, wherever it was written.
func TestReviewReplacesForgedCharge(t *testing.T) {
	c := charger(t, false)
	init := container("init", map[string]string{quota.MemoryResource: "1Gi"})
	app := container("a", map[string]string{"gpushare.io/gpu-mem": "8192", quota.MemoryResource: "1Mi", quota.ComputeResource: "1"})
	app.Resources.Requests = corev1.ResourceList{quota.MemoryResource: apiresource.MustParse("1Mi"), "cpu": apiresource.MustParse("100m")}
	resp, pod := review(t, c, &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{init}, Containers: []corev1.Container{app}}})
	if !resp.Allowed {
		t.Fatalf("refused: %s", resp.Result.Message)
	}
	if got := charged(t, &pod.Spec.Containers[0]); got != (quota.Charge{MemoryMiB: 8192}) {
		t.Errorf("charge %+v, want 8192 MiB and no compute", got)
	}
	if got := charged(t, &pod.Spec.InitContainers[0]); !got.Zero() {
		t.Errorf("init container keeps a charge: %+v", got)
	}
	if q := pod.Spec.Containers[0].Resources.Requests["cpu"]; q.MilliValue() != 100 {
		t.Errorf("the container's other requests changed: %v", pod.Spec.Containers[0].Resources.Requests)
	}
	// A pod that already says its own charge exactly gets no patch.
	if resp, _ := review(t, c, pod); resp.Patch != nil {
		t.Errorf("a pod with its own charge got a patch: %s", resp.Patch)
	}
}

// TestReviewUnpriced: a pod whose charge cannot be reckoned is refused
// where a quota bounds the charge, with why, and let through elsewhere.
func TestReviewUnpriced(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		pod        corev1.Pod
	}{
		{"a claim not yet created", "reading ResourceClaim missing", corev1.Pod{Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "x", ResourceClaimName: ptr.To("missing")}},
			Containers:     []corev1.Container{container("a", nil)}}}},
		{"whole GPUs of a model the cluster lacks", "no GPU in the cluster", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"gpushare.io/gpu-models": "Tesla V100"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{container("a", map[string]string{"gpushare.io/gpu-count": "1"})}}}},
		{"two dialects in one container", "keep the names of one system", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			container("a", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "gpushare.io/gpu-mem": "1000"})}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _ := review(t, charger(t, true), &tc.pod)
			if resp.Allowed || !strings.Contains(resp.Result.Message, tc.want) || !strings.Contains(resp.Result.Message, "GPU quota of namespace team-a") {
				t.Errorf("under a quota: allowed %v, message %v; want refused, naming %q", resp.Allowed, resp.Result, tc.want)
			}
			if resp, _ := review(t, charger(t, false), &tc.pod); !resp.Allowed {
				t.Errorf("without a quota: refused: %s", resp.Result.Message)
			}
		})
	}
}

func TestReviewLeavesOthersAlone(t *testing.T) {
	c := charger(t, true)
	raw, _ := json.Marshal(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("a", map[string]string{"gpushare.io/gpu-mem": "1"})}}})
	for _, req := range []admissionv1.AdmissionRequest{
		{Operation: admissionv1.Update, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: raw}},
		{Operation: admissionv1.Create, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, SubResource: "binding", Object: runtime.RawExtension{Raw: raw}},
		{Operation: admissionv1.Create, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Object: runtime.RawExtension{Raw: []byte("{}")}},
	} {
		if resp := c.Review(context.Background(), &req); !resp.Allowed || resp.Patch != nil {
			t.Errorf("%s %s/%s: allowed %v, patch %s", req.Operation, req.Resource.Resource, req.SubResource, resp.Allowed, resp.Patch)
		}
	}
	bad := admissionv1.AdmissionRequest{UID: types.UID("u"), Operation: admissionv1.Create, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Object: runtime.RawExtension{Raw: []byte(`{"spec":{"containers":"nope"}}`)}}
	if resp := c.Review(context.Background(), &bad); resp.Allowed || !strings.Contains(resp.Result.Message, "cannot read the pod") {
		t.Errorf("a pod that is not one: %+v", resp)
	}
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(charger(t, true).Handler(klog.Background()))
	defer srv.Close()
	pod, _ := json.Marshal(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("a", map[string]string{"aliyun.com/gpu-mem": "2"})}}})
	good, _ := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u2", Operation: admissionv1.Create, Namespace: "team-a",
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: pod}}})
	post := func(body []byte, contentType string) *http.Response {
		t.Helper()
		resp, err := http.Post(srv.URL, contentType, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post(good, "application/json")
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	_ = resp.Body.Close()
	if out.Kind != "AdmissionReview" || out.Request != nil || out.Response == nil || out.Response.UID != "u2" || !out.Response.Allowed ||
		!bytes.Contains(out.Response.Patch, []byte(`"gpushare.io/quota-memory":"2Gi"`)) {
		t.Errorf("review back: %+v", out)
	}
	for _, tc := range []struct {
		name, contentType string
		body              []byte
		status            int
	}{
		{"not JSON", "application/json", []byte("{{{"), 400},
		{"no request", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), 400},
		{"empty", "application/json", nil, 400},
		{"another type", "text/plain", good, 415},
		{"too large", "application/json", append([]byte(`{"request":{"object":"`), bytes.Repeat([]byte("a"), MaxBodyBytes)...), 413},
	} {
		resp := post(tc.body, tc.contentType)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d", resp.StatusCode)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := charger(t, true)
	c.Metrics = NewMetrics(reg)
	for _, p := range []*corev1.Pod{
		{Spec: corev1.PodSpec{Containers: []corev1.Container{container("a", map[string]string{"gpushare.io/gpu-mem": "100"})}}},
		{Spec: corev1.PodSpec{Containers: []corev1.Container{container("a", map[string]string{"gpushare.io/gpu-mem": "100"})}}},
		{Spec: corev1.PodSpec{Containers: []corev1.Container{container("a", nil)}}},
		{Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "x", ResourceClaimName: ptr.To("missing")}},
			Containers: []corev1.Container{container("a", nil)}}},
	} {
		review(t, c, p)
	}
	reg.MustRegister(NewQuotaCollector(func() ([]*corev1.ResourceQuota, error) {
		return []*corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "gpus"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
				"requests." + quota.MemoryResource: apiresource.MustParse("1Gi"), "requests." + quota.ComputeResource: apiresource.MustParse("250")}},
			Status: corev1.ResourceQuotaStatus{Used: corev1.ResourceList{"requests." + quota.MemoryResource: apiresource.MustParse("512Mi")}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "cpu"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.cpu": apiresource.MustParse("1")}}}}, nil
	}))
	want := `
# HELP gpushare_quota_compute_gpus GPU compute charged to a namespace (type used) and its bound (type hard), in GPUs, by ResourceQuota on gpushare.io/quota-compute.
# TYPE gpushare_quota_compute_gpus gauge
gpushare_quota_compute_gpus{namespace="team-a",resourcequota="gpus",type="hard"} 2.5
gpushare_quota_compute_gpus{namespace="team-a",resourcequota="gpus",type="used"} 0
# HELP gpushare_quota_list_errors 1 when the webhook could not list its ResourceQuotas for this scrape.
# TYPE gpushare_quota_list_errors gauge
gpushare_quota_list_errors 0
# HELP gpushare_quota_memory_bytes GPU memory charged to a namespace (type used) and its bound (type hard), by ResourceQuota on gpushare.io/quota-memory.
# TYPE gpushare_quota_memory_bytes gauge
gpushare_quota_memory_bytes{namespace="team-a",resourcequota="gpus",type="hard"} 1.073741824e+09
gpushare_quota_memory_bytes{namespace="team-a",resourcequota="gpus",type="used"} 5.36870912e+08
# HELP gpushare_quota_reviews_total Pod creations the quota webhook answered, by result: charged (a GPU charge written), uncharged (nothing to charge, or not priceable where no quota bounds GPUs), refused.
# TYPE gpushare_quota_reviews_total counter
gpushare_quota_reviews_total{result="charged"} 2
gpushare_quota_reviews_total{result="refused"} 1
gpushare_quota_reviews_total{result="uncharged"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
