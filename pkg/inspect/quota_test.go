package inspect

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/quota"
)

// resources is a ResourceList of name, quantity pairs.
func resources(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = k8sresource.MustParse(kv[i+1])
	}
	return l
}

func TestQuotas(t *testing.T) {
	c := &Cluster{Nodes: []Node{{Name: "n", GPUs: []GPU{
		{Holders: []Holder{
			{Pod: "a/p1", Kind: "App", MemoryMiB: 1000, Compute: 10},
			{Pod: "a/p1", Kind: "App", MemoryMiB: 500},
			{Pod: "a/p1", Kind: "Init", MemoryMiB: 4000},
			{Pod: "b/old", Kind: "App", MemoryMiB: 2048, Compute: 100},
		}},
		{Holders: []Holder{
			{Pod: "a/p2", Kind: "Sidecar", MemoryMiB: 300, Compute: 5},
			{Pod: "a/<claim>", Kind: "Claim", MemoryMiB: 700},
		}},
	}}}}
	quotas := []corev1.ResourceQuota{
		{ObjectMeta: metav1.ObjectMeta{Name: "gpus", Namespace: "a"},
			Spec:   corev1.ResourceQuotaSpec{Hard: resources("requests."+quota.MemoryResource, "10Gi", "requests."+quota.ComputeResource, "200")},
			Status: corev1.ResourceQuotaStatus{Used: resources("requests."+quota.MemoryResource, "6Gi", "requests."+quota.ComputeResource, "15")}},
		// A tighter memory bound in the same namespace wins.
		{ObjectMeta: metav1.ObjectMeta{Name: "tight", Namespace: "a"},
			Spec:   corev1.ResourceQuotaSpec{Hard: resources("requests."+quota.MemoryResource, "7Gi")},
			Status: corev1.ResourceQuotaStatus{Used: resources("requests."+quota.MemoryResource, "6Gi")}},
		// Quotas on other resources are not GPU quotas.
		{ObjectMeta: metav1.ObjectMeta{Name: "cpu", Namespace: "c"}, Spec: corev1.ResourceQuotaSpec{Hard: resources("requests.cpu", "4")}},
	}
	chargedPod := func(ns, name string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Resources: corev1.ResourceRequirements{Requests: resources(quota.MemoryResource, "1Gi")}}}}}
	}
	pods := []corev1.Pod{chargedPod("a", "p1"), chargedPod("a", "p2"), {ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "old"}}}
	qs := Quotas(c, quotas, pods)
	if len(qs) != 2 || qs[0].Namespace != "a" || qs[1].Namespace != "b" {
		t.Fatalf("namespaces: %+v", qs)
	}
	a := qs[0]
	// p1: apps 1500 beside its init's 4000 -> 4000; p2 300; the claim 700.
	if a.BookedMemoryMiB != 4000+300+700 || a.BookedCompute != 10+5 {
		t.Errorf("a booked %d MiB, %d%%", a.BookedMemoryMiB, a.BookedCompute)
	}
	if a.Memory == nil || *a.Memory != (Bound{Used: 6 * 1024, Hard: 7 * 1024}) || a.Compute == nil || *a.Compute != (Bound{Used: 15, Hard: 200}) {
		t.Errorf("a's bounds: memory %+v, compute %+v", a.Memory, a.Compute)
	}
	if len(a.Uncharged) != 0 || strings.Join(a.Quotas, ",") != "gpus,tight" {
		t.Errorf("a: uncharged %v, quotas %v", a.Uncharged, a.Quotas)
	}
	b := qs[1]
	if b.Memory != nil || b.Compute != nil || b.BookedMemoryMiB != 2048 || strings.Join(b.Uncharged, ",") != "old" {
		t.Errorf("b: %+v", b)
	}
	var out bytes.Buffer
	if err := WriteQuotas(&out, qs, GiB); err != nil {
		t.Fatal(err)
	}
	want := `NAMESPACE  QUOTA       MEMORY(GiB) USED/HARD  COMPUTE(%) USED/HARD  BOOKED(GiB)  BOOKED COMPUTE(%)  UNCHARGED PODS
a          gpus,tight  6/7                    15/200                4.8          15                 0
b          -           -                      -                     2            100                1
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestQuotasUnenforced: keys the API server never enforces (the bare
// name, limits., a misspelled resource) are not shown as bounds but named
// under the table; a bound lowered below its use is marked over.
func TestQuotasUnenforced(t *testing.T) {
	quotas := []corev1.ResourceQuota{
		{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "typo"},
			Spec: corev1.ResourceQuotaSpec{Hard: resources(quota.MemoryResource, "1Gi", "limits."+quota.ComputeResource, "100", "requests.gpushare.io/quota-memroy", "1Gi")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "gpus", Namespace: "z"},
			Spec:   corev1.ResourceQuotaSpec{Hard: resources("requests."+quota.ComputeResource, "50")},
			Status: corev1.ResourceQuotaStatus{Used: resources("requests."+quota.ComputeResource, "80")}},
	}
	qs := Quotas(&Cluster{}, quotas, nil)
	if len(qs) != 2 || qs[0].Memory != nil || qs[0].Compute != nil || len(qs[0].Quotas) != 0 {
		t.Fatalf("quotas: %+v", qs)
	}
	var out bytes.Buffer
	if err := WriteQuotas(&out, qs, GiB); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"z          gpus   -                      80/50 (over)",
		"ResourceQuota typo/bare: gpushare.io/quota-memory bounds nothing: the API server bounds an extended resource as requests.gpushare.io/quota-memory alone.",
		"ResourceQuota typo/bare: limits.gpushare.io/quota-compute bounds nothing: the API server bounds an extended resource as requests.gpushare.io/quota-compute alone.",
		"ResourceQuota typo/bare: requests.gpushare.io/quota-memroy bounds nothing: gpushare charges gpushare.io/quota-memory and gpushare.io/quota-compute alone.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output:\n%s\nwant %q", out.String(), want)
		}
	}
}
