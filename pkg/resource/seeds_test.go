package resource

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// The pod templates below are the systems' own, unchanged, except that the
// Elastic GPU Scheduler's "// 256MB memory" remarks, which are not YAML,
// became comments.

// The KETI system (GPU-Scheduler): Job nbody-benchmark-mps-test in userpod.
const ketiNbody = `
spec:
  hostIPC: true
  schedulerName: gpu-scheduler # GPU-Scheduler 사용을 위한 스케줄러 지정
  containers:
    - image: seedjeffwan/nbody:cuda-10.1
      name: nbody1
      args:
        - nbody
        - -benchmark
        - -numdevices=1
        - -numbodies=1982000
      resources:
        limits:
          keti.com/mpsgpu: 1 # GPU개수 요청 설정
          cpu: "250m"
          memory: "6400Mi"
        requests:
          cpu: "250m"
          memory: "6400Mi"
      volumeMounts: # GPU MPS 지원
        - name: nvidia-mps
          mountPath: /tmp/nvidia-mps 
  volumes: # GPU MPS 지원
    - name: nvidia-mps
      hostPath:
        path: /tmp/nvidia-mps
  restartPolicy: Never
`

// The Aliyun system (gpushare): StatefulSet binpack-1 (GiB device plugin).
const aliyunBinpack = `
metadata:
  labels:
    app: binpack-1

spec:
  containers:
  - name: binpack-1
    image: cheyang/gpu-player:v2
    resources:
      limits:
        # GiB  需要指定此pod需要多少的显存, 分配完之后可以使用nvidia-smi查看
        aliyun.com/gpu-mem: 3
`

// The Aliyun system (gpushare) with --memory-unit=MiB: Deployment gpu-test-mem.
const aliyunMiB = `
metadata:
  labels:
    app: gpu-test
spec:
  containers:
    - image: "docker.io/nvidia/cuda:11.6.2-base-ubuntu20.04"
      command:
        - bash
        - '-c'
        - while true; do sleep 2000; done
      name: recommend-system-container
      resources:
        limits:
          aliyun.com/gpu-mem: "3500"
`

// The Elastic GPU Scheduler: Deployment cuda-gpu-test, one GPU shared.
const elasticShared = `
metadata:
  labels:
    app: gpu-test
spec:
  containers:
    - name: cuda
      image: nvidia/cuda:10.0-base
      command: [ "sleep", "100000" ]
      resources:
        limits:
          elasticgpu.io/gpu-memory: "256" # 256MB memory 
`

// The Elastic GPU Scheduler: Deployment cuda-gpu-test, two GPUs.
const elasticTwoGPUs = `
metadata:
  labels:
    app: gpu-test
spec:
  containers:
    - name: cuda
      image: nvidia/cuda:10.0-base
      command: [ "sleep", "100000" ]
      resources:
        limits:
          elasticgpu.io/gpu-core: "200" # 2 GPU cards
`

func TestPodRequestSeeds(t *testing.T) {
	// The Aliyun system switches its device plugin to MiB: a config change.
	mib := &v1alpha1.ResourceModel{Resources: []v1alpha1.Resource{
		{Name: "aliyun.com/gpu-mem", Kind: v1alpha1.KindMemory, Unit: v1alpha1.MiB},
		{Name: "aliyun.com/gpu-count", Kind: v1alpha1.KindCount},
	}}
	cases := map[string]struct {
		cfg       *v1alpha1.ResourceModel
		namespace string
		name      string
		template  string
		want      *alloc.PodRequest
	}{
		"000 KETI nbody: 1 MPS GPU at the default 10%": {
			namespace: "userpod", name: "nbody-benchmark-mps-test-x7k2p", template: ketiNbody,
			want: &alloc.PodRequest{
				Key: "userpod/nbody-benchmark-mps-test-x7k2p", CPUMilli: 250, MemoryMiB: 6400,
				Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "nbody1", Count: 1, Compute: 10, MPS: true}}},
			},
		},
		"001 Aliyun binpack-1: 3 GiB = 3072 MiB": {
			namespace: "default", name: "binpack-1-0", template: aliyunBinpack,
			want: &alloc.PodRequest{
				Key:        "default/binpack-1-0",
				Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "binpack-1", Count: 1, MemoryMiB: 3072}}},
			},
		},
		"003 Aliyun in MiB: 3500 MiB": {
			cfg: mib, namespace: "default", name: "gpu-test-mem-5d8f7-abcde", template: aliyunMiB,
			want: &alloc.PodRequest{
				Key:        "default/gpu-test-mem-5d8f7-abcde",
				Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "recommend-system-container", Count: 1, MemoryMiB: 3500}}},
			},
		},
		"004 Elastic gpu-memory 256: 256 MiB of one GPU": {
			namespace: "default", name: "cuda-gpu-test-1", template: elasticShared,
			want: &alloc.PodRequest{
				Key:        "default/cuda-gpu-test-1",
				Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "cuda", Count: 1, MemoryMiB: 256}}},
			},
		},
		"004 Elastic gpu-core 200: 2 whole GPUs": {
			namespace: "default", name: "cuda-gpu-test-2", template: elasticTwoGPUs,
			want: &alloc.PodRequest{
				Key:        "default/cuda-gpu-test-2",
				Containers: []alloc.PodContainer{{ContainerRequest: alloc.ContainerRequest{Name: "cuda", Count: 2, Exclusive: true}}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := New(tc.cfg)
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			m.SetLargestGPU(24576)
			got, err := m.PodRequest(fromTemplate(t, tc.namespace, tc.name, tc.template))
			if err != nil {
				t.Fatalf("PodRequest() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PodRequest() (-want,+got):\n%s", diff)
			}
		})
	}
}

// The Aliyun system in GiB and in MiB in one cluster: the MiB team's namespace
// overrides the unit of aliyun.com/gpu-mem.
func TestPodRequestUnitOverride(t *testing.T) {
	m, err := New(&v1alpha1.ResourceModel{UnitOverrides: []v1alpha1.UnitOverride{
		{Name: "aliyun.com/gpu-mem", Unit: v1alpha1.MiB, Namespaces: []string{"team-mib"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		namespace, template string
		want                int64
	}{
		{"default", aliyunBinpack, 3 * 1024},
		{"team-mib", aliyunMiB, 3500},
		{"team-mib", aliyunBinpack, 3},
	} {
		req, err := m.PodRequest(fromTemplate(t, tc.namespace, "p", tc.template))
		if err != nil {
			t.Fatalf("%s: %v", tc.namespace, err)
		}
		if got := req.Containers[0].MemoryMiB; got != tc.want {
			t.Errorf("namespace %s: %d MiB, want %d", tc.namespace, got, tc.want)
		}
	}
	for _, bad := range []v1alpha1.UnitOverride{
		{Name: "elasticgpu.io/gpu-core", Unit: v1alpha1.MiB, Namespaces: []string{"a"}},
		{Name: "aliyun.com/gpu-mem", Unit: "KiB", Namespaces: []string{"a"}},
		{Name: "aliyun.com/gpu-mem", Unit: v1alpha1.MiB},
		{Name: "aliyun.com/gpu-mem", Unit: v1alpha1.MiB, Namespaces: []string{"Not_A_Namespace"}},
	} {
		if _, err := New(&v1alpha1.ResourceModel{UnitOverrides: []v1alpha1.UnitOverride{bad}}); err == nil {
			t.Errorf("override %+v accepted", bad)
		}
	}
}
