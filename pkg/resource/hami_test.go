package resource

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// hamiModel is the built-in model with HAMi's names, as a cluster moving
// from HAMi configures it.
func hamiModel(t *testing.T) *Model {
	t.Helper()
	m, err := New(&v1alpha1.ResourceModel{Resources: append(v1alpha1.DefaultResources(), v1alpha1.HAMiResources()...)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHAMiExamples: HAMi's example pods (examples/hami/pods, their resources
// and annotations HAMi's own) ask what HAMi gives them.
func TestHAMiExamples(t *testing.T) {
	m := hamiModel(t)
	m.SetLargestGPU(81920)
	share := func(count int, mib, pct, compute int64) alloc.ContainerRequest {
		return alloc.ContainerRequest{Name: "ubuntu-container", Count: count, MemoryMiB: mib, MemoryPercent: pct, Compute: compute}
	}
	whole := func(count int) alloc.ContainerRequest {
		return alloc.ContainerRequest{Name: "ubuntu-container", Count: count, Exclusive: true}
	}
	want := map[string]struct {
		c      alloc.ContainerRequest
		filter *alloc.Filter
		node   string
		gpu    string
	}{
		// 3000 MiB on each GPU: the total over one GPU.
		"default-use":         {c: share(1, 3000, 0, 30)},
		"use-memory-fraction": {c: share(2, 0, 50, 30)},
		"use-exclusive-card":  {c: whole(2)},
		// HAMi's webhook gives a count alone 100 cores (v2.7): whole.
		"use-as-normal":             {c: whole(1)},
		"specify-card-type-to-use":  {c: whole(2), filter: &alloc.Filter{Types: []string{"A100", "V100"}}},
		"specify-card-type-not-use": {c: whole(2), filter: &alloc.Filter{NotTypes: []string{"1080", "2080"}}},
		"specify-uuid-to-use": {c: whole(1), filter: &alloc.Filter{UUIDs: []string{
			"GPU-03f69c50-207a-2038-9b45-23cac89cb67d", "GPU-03f69c50-207a-2038-9b45-23cac89cb67e"}}},
		"specify-uuid-not-use":      {c: whole(2), filter: &alloc.Filter{NotUUIDs: []string{"GPU-03f69c50-207a-2038-9b45-23cac89cb67d"}}},
		"specify-scheduling-policy": {c: whole(1), node: "spread", gpu: "binpack"},
		"use-sharing-card-1":        {c: share(1, 0, 40, 60)},
		"use-sharing-card-2":        {c: share(1, 0, 60, 40)},
	}
	files, err := filepath.Glob("../../examples/hami/pods/*.yaml")
	if err != nil || len(files) != len(want) {
		t.Fatalf("examples/hami/pods: %d files (%v), want %d", len(files), err, len(want))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(b, &pod); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		pod.Namespace = "hami"
		w, ok := want[pod.Name]
		if !ok {
			t.Fatalf("%s: no expectation for pod %s", f, pod.Name)
		}
		req, err := m.PodRequest(&pod)
		if err != nil {
			t.Errorf("%s: %v", pod.Name, err)
			continue
		}
		w.c.Filter = w.filter
		if diff := cmp.Diff([]alloc.PodContainer{{ContainerRequest: w.c}}, req.Containers); diff != "" {
			t.Errorf("%s (-want +got):\n%s", pod.Name, diff)
		}
		node, gpu, err := PodPolicies(&pod)
		if err != nil || node != w.node || gpu != w.gpu {
			t.Errorf("%s: policies %q %q (%v), want %q %q", pod.Name, node, gpu, err, w.node, w.gpu)
		}
	}
}

// HAMi's rules where a spec leaves something out, or asks too much.
func TestHAMiRules(t *testing.T) {
	m := hamiModel(t)
	m.SetLargestGPU(16384)
	for name, c := range map[string]struct {
		limits []string
		want   alloc.ContainerRequest
		err    string
	}{
		"gpumem alone is one GPU (the webhook's default count)": {
			limits: []string{"nvidia.com/gpumem", "2000"}, want: alloc.ContainerRequest{Count: 1, MemoryMiB: 2000}},
		"gpucores alone asks all the memory":         {limits: []string{"nvidia.com/gpu", "1", "nvidia.com/gpucores", "30"}, want: alloc.ContainerRequest{Count: 1, MemoryPercent: 100, Compute: 30}},
		"gpumem beats gpumem-percentage, as in HAMi": {limits: []string{"nvidia.com/gpumem", "1000", "nvidia.com/gpumem-percentage", "50"}, want: alloc.ContainerRequest{Count: 1, MemoryMiB: 1000}},
		"gpucores above 100 is 100":                  {limits: []string{"nvidia.com/gpu", "1", "nvidia.com/gpucores", "150"}, want: alloc.ContainerRequest{Count: 1, Exclusive: true}},
		"gpucores 100 with memory takes the GPU":     {limits: []string{"nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000", "nvidia.com/gpucores", "100"}, want: alloc.ContainerRequest{Count: 1, Exclusive: true}},
		"memory per GPU times the count":             {limits: []string{"nvidia.com/gpu", "3", "nvidia.com/gpumem", "1000"}, want: alloc.ContainerRequest{Count: 3, MemoryMiB: 3000}},
		"percentage over 100":                        {limits: []string{"nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "120"}, err: "120 is more than 100 percent"},
		"more memory than any GPU":                   {limits: []string{"nvidia.com/gpu", "2", "nvidia.com/gpumem", "20000"}, err: "20000 MiB per GPU is more than the largest GPU holds"},
		"mixed with gpushare's total memory": {limits: []string{"nvidia.com/gpu", "1", "gpushare.io/gpu-mem", "1000", "nvidia.com/gpucores", "20"},
			err: "asks for all of the container's GPUs together, nvidia.com/gpucores for each of them"},
		"MPS beside HAMi's": {limits: []string{"keti.com/mpsgpu", "1", "nvidia.com/gpumem", "1000"}, err: "keti.com/mpsgpu"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := makePod("p").app("main", limits(c.limits...)).obj()
			req, err := m.PodRequest(pod)
			if c.err != "" {
				var re *RequestError
				if !errors.As(err, &re) || !errors.Is(err, alloc.ErrInvalidRequest) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want a RequestError with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.want.Name = "main"
			if diff := cmp.Diff([]alloc.PodContainer{{ContainerRequest: c.want}}, req.Containers); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestHAMiPolicies(t *testing.T) {
	pod := makePod("p").annotate(GPUPolicyAnnotation, "topology-aware").obj()
	if _, _, err := PodPolicies(pod); err == nil || !strings.Contains(err.Error(), `"topology-aware" is not a policy a pod may pick in gpushare`) {
		t.Errorf("topology-aware: %v", err)
	}
	pod = makePod("p").annotate(NodePolicyAnnotation, " binpack ").obj()
	if n, g, err := PodPolicies(pod); n != "binpack" || g != "" || err != nil {
		t.Errorf("binpack: %q %q %v", n, g, err)
	}
}
