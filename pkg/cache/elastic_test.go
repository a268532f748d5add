package cache_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

// elasticContainer asks Elastic's resources: name, then pairs of
// resource (without elasticgpu.io/) and amount; its GPU indexes are what
// Elastic wrote for it, "" for no annotation.
type elasticContainer struct {
	name, gpus string
	asks       []string
}

// elasticPod is a running pod bound to node with the annotations Elastic
// writes at bind (assumed "true" unless assumed says otherwise).
func elasticPod(uid, node, assumed string, cs ...elasticContainer) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pod-" + uid, UID: types.UID(uid),
			Annotations: map[string]string{record.ElasticAssumed: assumed}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, c := range cs {
		r := corev1.ResourceList{}
		for i := 0; i < len(c.asks); i += 2 {
			r[corev1.ResourceName("elasticgpu.io/"+c.asks[i])] = k8sresource.MustParse(c.asks[i+1])
		}
		// Elastic reads requests; extended resources need limits too.
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c.name,
			Resources: corev1.ResourceRequirements{Limits: r, Requests: r}})
		if c.gpus != "" {
			p.Annotations[record.ElasticContainerPrefix+c.name] = c.gpus
		}
	}
	return p
}

func elasticCache(t *testing.T) (*cache.Cache, *[]string) {
	t.Helper()
	return foreignCache(t, nil)
}

// foreignCache is a cache reading records by the resource model cfg (nil:
// the built-in one), and the refusals it reports.
func foreignCache(t *testing.T, cfg *v1alpha1.ResourceModel) (*cache.Cache, *[]string) {
	t.Helper()
	model, err := resource.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	r := &logRecorder{}
	c := cache.New(r.logger(), cache.Options{Requests: model.PodRequest, Refused: func(p *corev1.Pod, err error) {
		refused = append(refused, p.Name+": "+err.Error())
	}})
	return c, &refused
}

// Pods Elastic placed book their GPUs by index: shares as asked, whole
// GPUs whole.
func TestElasticRecordsBook(t *testing.T) {
	c, refused := elasticCache(t)
	c.SetNode(gpuNode(t, "n1", 15360, 15360, 15360, 15360))
	// a: 4096 MiB and 30% on GPU 1, 256 MiB on GPU 0.
	c.SetPod(elasticPod("a", "n1", "true",
		elasticContainer{"main", "1", []string{"gpu-memory", "4096", "gpu-core", "30"}},
		elasticContainer{"side", "0", []string{"gpu-memory", "256"}}))
	// b: gpu-core 200, GPUs 2 and 3 whole.
	c.SetPod(elasticPod("b", "n1", "true", elasticContainer{"train", "3,2", []string{"gpu-core", "200"}}))
	want := []alloc.Usage{{MemoryMiB: 256}, {MemoryMiB: 4096, Compute: 30},
		{MemoryMiB: 15360, Compute: 100}, {MemoryMiB: 15360, Compute: 100}}
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) {
		t.Fatalf("booked %v, want %v (-want +got):\n%s", got, want, cmp.Diff(want, got))
	}
	if len(*refused) != 0 {
		t.Fatalf("refused %q", *refused)
	}
	// Another Elastic annotation changes the value, not the booking.
	p := elasticPod("b", "n1", "true", elasticContainer{"train", "3,2", []string{"gpu-core", "200"}})
	p.Annotations[record.ElasticContainerPrefix+"gone"] = "0"
	c.SetPod(p)
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) || len(*refused) != 0 {
		t.Fatalf("after another annotation: %v, refused %q", got, *refused)
	}
	// A new record for a booked pod is not taken.
	c.SetPod(elasticPod("b", "n1", "true", elasticContainer{"train", "0,1", []string{"gpu-core", "200"}}))
	if got := usage(t, c, "n1"); !cmp.Equal(got, want) || len(*refused) != 1 || !strings.Contains((*refused)[0], "changed") {
		t.Fatalf("after a new record: %v, refused %q", got, *refused)
	}
}

// A pod that also has gpushare's record is booked by gpushare's.
func TestOwnRecordBeforeElastic(t *testing.T) {
	c, refused := elasticCache(t)
	c.SetNode(gpuNode(t, "n1", 15360, 15360))
	p := elasticPod("a", "n1", "true", elasticContainer{"main", "1", []string{"gpu-memory", "3072"}})
	value, err := gpusharev1.Marshal(&gpusharev1.Allocation{Node: "n1", Containers: []gpusharev1.ContainerAllocation{{
		Name: "main", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{share("n1", 0, 3072, 0)}}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[gpusharev1.AllocationAnnotation] = value
	c.SetPod(p)
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 3072}, {}}; !cmp.Equal(got, want) {
		t.Fatalf("booked %v, want gpushare's record %v", got, want)
	}
	if len(*refused) != 0 {
		t.Fatalf("refused %q", *refused)
	}
}

// Records that cannot be what Elastic placed book nothing and are
// reported; one that over-commits its GPU is held and reported.
func TestElasticRecordsRefused(t *testing.T) {
	mem := func(gpus, mib string) elasticContainer {
		return elasticContainer{"main", gpus, []string{"gpu-memory", mib}}
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want string
		held bool // GPU 0 is held full afterwards
	}{
		"not bound":          {pod: elasticPod("a", "", "true", mem("0", "1024")), want: "not bound"},
		"not assumed":        {pod: elasticPod("a", "n1", "false", mem("0", "1024")), want: `elasticgpu.io/assumed="false"`},
		"no such GPU":        {pod: elasticPod("a", "n1", "true", mem("2", "1024")), want: "node n1 has no GPU 2"},
		"not an index":       {pod: elasticPod("a", "n1", "true", mem("zero", "1024")), want: `"zero" is not a GPU index`},
		"a share on two":     {pod: elasticPod("a", "n1", "true", mem("0,1", "1024")), want: "names 2 GPUs, the container asks 1"},
		"container unplaced": {pod: elasticPod("a", "n1", "true", mem("", "1024")), want: "has no elasticgpu.io/container-main"},
		"one GPU twice": {pod: elasticPod("a", "n1", "true", elasticContainer{"main", "0,0", []string{"gpu-core", "200"}}),
			want: "GPU 0 is listed twice"},
		"asks nothing of Elastic": {pod: elasticPod("a", "n1", "true", elasticContainer{name: "main", gpus: "0"}),
			want: "the pod asks no elasticgpu.io"},
		// 20000 MiB on a GPU of 15360: held full, and said.
		"more than the GPU": {pod: elasticPod("a", "n1", "true", elasticContainer{"main", "0", []string{"gpu-memory", "20000"}}),
			want: "over-commits its GPU", held: true},
	} {
		t.Run(name, func(t *testing.T) {
			c, refused := elasticCache(t)
			c.SetNode(gpuNode(t, "n1", 15360, 15360))
			c.SetPod(tc.pod)
			c.SetPod(tc.pod)
			if len(*refused) != 1 || !strings.Contains((*refused)[0], tc.want) ||
				!strings.Contains((*refused)[0], "placement record of Elastic GPU Scheduler") {
				t.Fatalf("reported %q, want once %q", *refused, tc.want)
			}
			if got := !c.Snapshot()[0].Node.GPUs[0].Healthy; got != tc.held {
				t.Fatalf("GPU 0 held full: %v, want %v", got, tc.held)
			}
			if got := usage(t, c, "n1"); !tc.held && !cmp.Equal(got, []alloc.Usage{{}, {}}) {
				t.Fatalf("booked %v, want nothing", got)
			}
		})
	}
}

func TestElasticAllocation(t *testing.T) {
	model, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := elasticPod("a", "n1", "true",
		elasticContainer{"main", " 1 ", []string{"gpu-memory", "256"}},
		elasticContainer{"train", "2,0", []string{"gpu-core", "200"}})
	req, err := model.PodRequest(p)
	if err != nil {
		t.Fatal(err)
	}
	a, err := record.ForeignAllocation(p, req)
	if err != nil {
		t.Fatal(err)
	}
	want := &gpusharev1.Allocation{Node: "n1", Containers: []gpusharev1.ContainerAllocation{
		{Name: "main", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{{Index: 1, MemoryMiB: 256}}},
		{Name: "train", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{{Index: 2}, {Index: 0}}},
	}}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Fatalf("ForeignAllocation (-want +got):\n%s", diff)
	}
	// On the node: UUIDs by index, whole GPUs sized by it.
	gpus := []alloc.GPU{{Index: 0, UUID: "u0", MemoryMiB: 15000}, {Index: 1, UUID: "u1", MemoryMiB: 15000}, {Index: 2, UUID: "u2", MemoryMiB: 80000}}
	placed, err := record.OnNode(a, req, gpus)
	if err != nil {
		t.Fatal(err)
	}
	want.Containers[0].GPUs[0].UUID = "u1"
	want.Containers[1].GPUs = []gpusharev1.GPUShare{{Index: 2, UUID: "u2", MemoryMiB: 80000, Compute: 100},
		{Index: 0, UUID: "u0", MemoryMiB: 15000, Compute: 100}}
	if diff := cmp.Diff(want, placed); diff != "" {
		t.Fatalf("OnNode (-want +got):\n%s", diff)
	}
	if err := record.Foreign(p); !errors.Is(err, record.ErrElasticRecord) || !errors.Is(err, record.ErrForeignRecord) {
		t.Fatalf("Foreign = %v, want Elastic's, a foreign record", err)
	}
	if !record.Recorded(p) {
		t.Fatal("Recorded = false for Elastic's record")
	}
}

// TestForeignRecordsHeldWholeUnderAModelWithoutTheirResources: a
// resource model that no longer knows Elastic's resources (an operator
// removed them and restarted the scheduler) reads no request from a
// running Elastic pod; its record then holds the GPUs it names whole,
// and is reported, rather than booking nothing while the pod's
// containers run there.
func TestForeignRecordsHeldWholeUnderAModelWithoutTheirResources(t *testing.T) {
	cfg := v1alpha1.Default()
	cfg.Resources = slices.DeleteFunc(cfg.Resources, func(r v1alpha1.Resource) bool { return strings.HasPrefix(string(r.Name), "elasticgpu.io/") })
	c, refused := foreignCache(t, cfg)
	c.SetNode(gpuNode(t, "n1", 15360, 15360))
	c.SetPod(elasticPod("a", "n1", "true", elasticContainer{name: "main", gpus: "1", asks: []string{"gpu-memory", "1024"}}))
	if got, want := usage(t, c, "n1"), []alloc.Usage{{}, {MemoryMiB: 15360, Compute: alloc.FullCompute}}; !cmp.Equal(got, want) {
		t.Errorf("booked %v, want %v: GPU 1 held whole", got, want)
	}
	if len(*refused) != 1 || !strings.Contains((*refused)[0], "holding the GPUs it names whole") {
		t.Errorf("reported %q, want once that the record holds its GPUs whole", *refused)
	}
}
