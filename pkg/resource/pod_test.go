package resource

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// gpu is a PodContainer for want lists.
func gpu(kind alloc.ContainerKind, r alloc.ContainerRequest) alloc.PodContainer {
	return alloc.PodContainer{ContainerRequest: r, Kind: kind}
}

func TestPodRequest(t *testing.T) {
	const (
		mem   = "gpushare.io/gpu-mem"
		core  = "gpushare.io/gpu-core"
		count = "gpushare.io/gpu-count"
	)
	cases := map[string]struct {
		pod  *corev1.Pod
		want *alloc.PodRequest
	}{
		"no GPU; a malformed models annotation is not our business": {
			pod: makePod("web").annotate("gpushare.io/gpu-models", "||").
				app("nginx", reqs("cpu", "100m", "memory", "64Mi")).obj(),
			want: &alloc.PodRequest{Key: "default/web", CPUMilli: 100, MemoryMiB: 64},
		},
		"memory and a compute share": {
			pod: makePod("p").app("c", limits(mem, "4096", core, "50")).obj(),
			want: &alloc.PodRequest{Key: "default/p", Containers: []alloc.PodContainer{
				gpu(alloc.App, alloc.ContainerRequest{Name: "c", Count: 1, MemoryMiB: 4096, Compute: 50}),
			}},
		},
		"compute 100 is one whole GPU": {
			pod: makePod("p").app("c", limits(core, "100")).obj(),
			want: &alloc.PodRequest{Key: "default/p", Containers: []alloc.PodContainer{
				gpu(alloc.App, alloc.ContainerRequest{Name: "c", Count: 1, Exclusive: true}),
			}},
		},
		"count alone: whole GPUs": {
			pod: makePod("p").app("c", limits("aliyun.com/gpu-count", "2")).obj(),
			want: &alloc.PodRequest{Key: "default/p", Containers: []alloc.PodContainer{
				gpu(alloc.App, alloc.ContainerRequest{Name: "c", Count: 2, Exclusive: true}),
			}},
		},
		"count with memory: 8 GiB over 2 GPUs, 4096 MiB each": {
			pod: makePod("p").app("c", limits("aliyun.com/gpu-count", "2", "aliyun.com/gpu-mem", "8")).obj(),
			want: &alloc.PodRequest{Key: "default/p", Containers: []alloc.PodContainer{
				gpu(alloc.App, alloc.ContainerRequest{Name: "c", Count: 2, MemoryMiB: 8192}),
			}},
		},
		"count with a compute share: 30% of each of 3 GPUs": {
			pod: makePod("p").app("c", limits(count, "3", core, "30")).obj(),
			want: &alloc.PodRequest{Key: "default/p", Containers: []alloc.PodContainer{
				gpu(alloc.App, alloc.ContainerRequest{Name: "c", Count: 3, Compute: 30}),
			}},
		},
		"count agreeing with compute 200": {
			pod: makePod("p").app("c", limits(count, "2", core, "200")).obj(),
			want: &alloc.PodRequest{Key: "default/p", Containers: []alloc.PodContainer{
				gpu(alloc.App, alloc.ContainerRequest{Name: "c", Count: 2, Exclusive: true}),
			}},
		},
		"requests only, and limits equal to requests": {
			pod: makePod("p").
				app("a", reqs(mem, "1024")).
				app("b", corev1.ResourceRequirements{Limits: list(core, "20"), Requests: list(core, "20")}).obj(),
			want: &alloc.PodRequest{Key: "default/p", Containers: []alloc.PodContainer{
				gpu(alloc.App, alloc.ContainerRequest{Name: "a", Count: 1, MemoryMiB: 1024}),
				gpu(alloc.App, alloc.ContainerRequest{Name: "b", Count: 1, Compute: 20}),
			}},
		},
		"several GPU containers, each its own, models for all": {
			// The sidecar case the Aliyun system warns about: a pod of several GPU containers.
			pod: makePod("review").annotate("gpushare.io/gpu-models", " NVIDIA A100-SXM4-40GB | NVIDIA H100 80GB HBM3 ").
				app("model", limits("elasticgpu.io/gpu-memory", "8000", "elasticgpu.io/gpu-core", "40")).
				app("log", limits("cpu", "50m")).
				app("ranker", limits("aliyun.com/gpu-mem", "2")).obj(),
			want: &alloc.PodRequest{Key: "default/review", CPUMilli: 50, Containers: []alloc.PodContainer{
				gpu(alloc.App, alloc.ContainerRequest{Name: "model", Count: 1, MemoryMiB: 8000, Compute: 40,
					Models: []string{"NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"}}),
				gpu(alloc.App, alloc.ContainerRequest{Name: "ranker", Count: 1, MemoryMiB: 2048,
					Models: []string{"NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"}}),
			}},
		},
		"init and sidecar containers, in spec order": {
			// CPU: apps 100 + sidecars (200 + 300) = 600; init "warm" runs
			// with sidecar "proxy" started: 700 + 200 = 900; init "fetch"
			// runs alone: 500. max(600, 900, 500) = 900, + 100 overhead.
			// Memory: apps 256 + 512 + 128 = 896; warm 1024 + 512 = 1536;
			// max = 1536, + 64 overhead = 1600 MiB.
			pod: makePod("p").
				initContainer("fetch", reqs("cpu", "500m", "memory", "100Mi")).
				sidecar("proxy", reqs("cpu", "200m", "memory", "512Mi", mem, "512")).
				initContainer("warm", reqs("cpu", "700m", "memory", "1Gi", core, "50")).
				sidecar("metrics", reqs("cpu", "300m", "memory", "128Mi")).
				app("main", reqs("cpu", "100m", "memory", "256Mi", "gpushare.io/gpu-count", "1")).
				overhead("cpu", "100m", "memory", "64Mi").obj(),
			want: &alloc.PodRequest{Key: "default/p", CPUMilli: 1000, MemoryMiB: 1600, Containers: []alloc.PodContainer{
				gpu(alloc.Sidecar, alloc.ContainerRequest{Name: "proxy", Count: 1, MemoryMiB: 512}),
				gpu(alloc.Init, alloc.ContainerRequest{Name: "warm", Count: 1, Compute: 50}),
				gpu(alloc.App, alloc.ContainerRequest{Name: "main", Count: 1, Exclusive: true}),
			}},
		},
		"limits stand in for missing CPU and memory requests; memory rounds up to MiB": {
			pod:  makePod("p").app("c", limits("cpu", "1", "memory", "1000000")).obj(),
			want: &alloc.PodRequest{Key: "default/p", CPUMilli: 1000, MemoryMiB: 1},
		},
		"pod-level requests replace the containers' sum": {
			pod: makePod("p").podRequests("cpu", "2").
				app("a", reqs("cpu", "500m", "memory", "1Gi")).
				app("b", reqs("cpu", "500m", "memory", "1Gi")).obj(),
			want: &alloc.PodRequest{Key: "default/p", CPUMilli: 2000, MemoryMiB: 2048},
		},
		"MPS with the pod's compute and memory annotations": {
			// 2 GPUs, 4Gi = 4096 MiB on each: 8192 MiB in all, 25% of each.
			pod: makePod("p").annotate("gpushare.io/mps-compute", "25").annotate("GPUlimits", "4Gi").
				app("a", limits("keti.com/mpsgpu", "2")).
				app("b", limits("keti.com/mpsgpu", "1")).obj(),
			want: &alloc.PodRequest{Key: "default/p", Containers: []alloc.PodContainer{
				gpu(alloc.App, alloc.ContainerRequest{Name: "a", Count: 2, Compute: 25, MemoryMiB: 8192, MPS: true}),
				gpu(alloc.App, alloc.ContainerRequest{Name: "b", Count: 1, Compute: 25, MemoryMiB: 4096, MPS: true}),
			}},
		},
	}
	m, err := New(nil)
	if err != nil {
		t.Fatalf("New(nil) error = %v", err)
	}
	m.SetLargestGPU(81920)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := m.PodRequest(tc.pod)
			if err != nil {
				t.Fatalf("PodRequest() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PodRequest() (-want,+got):\n%s", diff)
			}
		})
	}
}
