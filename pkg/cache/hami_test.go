package cache_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/record"
)

// hamiPod is a running pod bound to node as HAMi leaves it: containers
// (name, then pairs of resource without nvidia.com/ and amount), their
// devices in hami.io/vgpu-devices-allocated.
func hamiPod(uid, node, allocated string, init []string, cs ...[]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pod-" + uid, UID: types.UID(uid),
			Annotations: map[string]string{record.HAMiNode: node, record.HAMiAllocated: allocated,
				record.HAMiToAllocate: ";", "hami.io/bind-phase": "success"}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	container := func(c []string) corev1.Container {
		r := corev1.ResourceList{}
		for i := 1; i < len(c); i += 2 {
			r[corev1.ResourceName("nvidia.com/"+c[i])] = k8sresource.MustParse(c[i+1])
		}
		return corev1.Container{Name: c[0], Resources: corev1.ResourceRequirements{Limits: r}}
	}
	if init != nil {
		p.Spec.InitContainers = append(p.Spec.InitContainers, container(init))
	}
	for _, c := range cs {
		p.Spec.Containers = append(p.Spec.Containers, container(c))
	}
	return p
}

func hamiCache(t *testing.T) (*cache.Cache, *[]string) {
	t.Helper()
	return foreignCache(t, &v1alpha1.ResourceModel{Resources: append(v1alpha1.DefaultResources(), v1alpha1.HAMiResources()...)})
}

// Pods HAMi placed book the GPUs its record names by UUID: MiB shares as
// recorded, percent shares of the GPU they are on, whole GPUs whole; in
// the records of HAMi before v2.9 (app containers only) and after (init
// containers first, empty slots for GPU-less containers).
func TestHAMiRecordsBook(t *testing.T) {
	c, refused := hamiCache(t)
	c.SetNode(gpuNode(t, "n1", 15360, 15360, 81920, 15360))
	u := func(i int) string { return uuidOf("n1", i) }
	// a: v2.10's record of default_use.yaml on GPU 1.
	c.SetPod(hamiPod("a", "n1", u(1)+",NVIDIA,3000,30:;", nil, []string{"main", "gpu", "1", "gpumem", "3000", "gpucores", "30"}))
	// b: half of GPUs 1 and 2, an init container without GPUs first.
	c.SetPod(hamiPod("b", "n1", ";"+u(2)+",NVIDIA,40960,10:"+u(1)+",NVIDIA,7680,10:;", []string{"setup"},
		[]string{"main", "gpu", "2", "gpumem-percentage", "50", "gpucores", "10"}))
	// c: GPU 3 whole, recorded by HAMi before v2.9 beside an init
	// container that has no slot.
	c.SetPod(hamiPod("c", "n1", u(3)+",NVIDIA,15360,100:;", []string{"setup"}, []string{"main", "gpu", "1"}))
	// d: a GPU-less pod's record with an empty slot to spare books nothing.
	c.SetPod(hamiPod("d", "n1", ";;", nil, []string{"main"}))
	want := []alloc.Usage{{}, {MemoryMiB: 3000 + 7680, Compute: 40}, {MemoryMiB: 40960, Compute: 10}, {MemoryMiB: 15360, Compute: 100}}
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Fatalf("booked %v, want %v (-want +got):\n%s", got, want, cmp.Diff(want, got))
	}
	if len(*refused) != 0 {
		t.Fatalf("refused %q", *refused)
	}
}

// Records that cannot be what HAMi placed for the pod book nothing, and
// say why.
func TestHAMiRecordsRefused(t *testing.T) {
	u := uuidOf("n1", 0)
	main := []string{"main", "gpu", "1", "gpumem", "3000"}
	for name, c := range map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"more MiB than asked":  {hamiPod("a", "n1", u+",NVIDIA,9000,0:;", nil, main), "gets 9000 MiB, the container asks 3000 MiB"},
		"other cores":          {hamiPod("a", "n1", u+",NVIDIA,3000,50:;", nil, main), "gets 50% compute, the container asks 0%"},
		"two GPUs for one":     {hamiPod("a", "n1", u+",NVIDIA,3000,0:"+uuidOf("n1", 1)+",NVIDIA,3000,0:;", nil, main), "asks 1 GPUs, the record gives it 2"},
		"unknown GPU":          {hamiPod("a", "n1", "GPU-elsewhere,NVIDIA,3000,0:;", nil, main), "node n1 has no GPU GPU-elsewhere"},
		"another node":         {hamiPod("a", "n2", u+",NVIDIA,3000,0:;", nil, main), "the pod is bound to"},
		"slots for no one":     {hamiPod("a", "n1", u+",NVIDIA,3000,0:;"+uuidOf("n1", 1)+",NVIDIA,5,0:;", nil, main), "has 2 container slots, the pod has 1 containers"},
		"not numbers":          {hamiPod("a", "n1", u+",NVIDIA,lots,0:;", nil, main), "must be non-negative integers"},
		"a GPU for no request": {hamiPod("a", "n1", u+",NVIDIA,3000,0:;"+u+",NVIDIA,1,0:;", nil, main, []string{"side"}), "container side asks no GPU"},
	} {
		t.Run(name, func(t *testing.T) {
			ca, refused := hamiCache(t)
			ca.SetNode(gpuNode(t, "n1", 15360, 15360))
			if name == "another node" {
				c.pod.Spec.NodeName = "n1"
			}
			ca.SetPod(c.pod)
			if got := usage(t, ca, "n1"); !cmp.Equal(got, []alloc.Usage{{}, {}}) {
				t.Errorf("booked %v", got)
			}
			if len(*refused) != 1 || !strings.Contains((*refused)[0], c.want) || !strings.Contains((*refused)[0], "the placement record of HAMi") {
				t.Errorf("refused %q, want one naming HAMi's record and %q", *refused, c.want)
			}
		})
	}
}
