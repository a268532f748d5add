package holder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// aliyunMemory is the resource as Aliyun's pod specs write it.
const aliyunMemory corev1.ResourceName = "aliyun.com/gpu-mem"

func TestAliyunEnv(t *testing.T) {
	asking := func(name corev1.ResourceName, amounts ...int64) *corev1.Pod {
		p := &corev1.Pod{}
		for i, a := range amounts {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: []string{"main", "side"}[i],
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{name: *k8sresource.NewQuantity(a, k8sresource.DecimalSI)}}})
		}
		return p
	}
	on := func(mib ...int64) *gpusharev1.ContainerAllocation {
		c := &gpusharev1.ContainerAllocation{Name: "main"}
		for i, m := range mib {
			c.GPUs = append(c.GPUs, gpusharev1.GPUShare{Index: i + 2, MemoryMiB: m})
		}
		return c
	}
	for name, tc := range map[string]struct {
		pod     *corev1.Pod
		alloc   *gpusharev1.ContainerAllocation
		unitMiB int64
		gpuMiB  []int64
		want    []string
	}{
		// A T4 of 15360 MiB is 15 GiB; 3 GiB asked is 3072 MiB in the
		// record.
		"GiB": {pod: asking(aliyunMemory, 3), alloc: on(3072), unitMiB: 1024, gpuMiB: []int64{15360},
			want: []string{"ALIYUN_COM_GPU_MEM_IDX=2", "ALIYUN_COM_GPU_MEM_CONTAINER=3", "ALIYUN_COM_GPU_MEM_DEV=15", "ALIYUN_COM_GPU_MEM_POD=3"}},
		// Under MiB the amounts are MiB as they are.
		"MiB": {pod: asking(aliyunMemory, 3500), alloc: on(3500), unitMiB: 1, gpuMiB: []int64{15360},
			want: []string{"ALIYUN_COM_GPU_MEM_IDX=2", "ALIYUN_COM_GPU_MEM_CONTAINER=3500", "ALIYUN_COM_GPU_MEM_DEV=15360", "ALIYUN_COM_GPU_MEM_POD=3500"}},
		// A real T4 reports 15109 MiB: 15109/1024 = 14.75, rounded down to
		// 14 as Aliyun's plugin does.
		"GiB rounded down": {pod: asking(aliyunMemory, 3), alloc: on(3072), unitMiB: 1024, gpuMiB: []int64{15109},
			want: []string{"ALIYUN_COM_GPU_MEM_IDX=2", "ALIYUN_COM_GPU_MEM_CONTAINER=3", "ALIYUN_COM_GPU_MEM_DEV=14", "ALIYUN_COM_GPU_MEM_POD=3"}},
		// POD adds up the app containers: 3 + 5 = 8 GiB.
		"the pod's total": {pod: asking(aliyunMemory, 3, 5), alloc: on(3072), unitMiB: 1024, gpuMiB: []int64{16384},
			want: []string{"ALIYUN_COM_GPU_MEM_IDX=2", "ALIYUN_COM_GPU_MEM_CONTAINER=3", "ALIYUN_COM_GPU_MEM_DEV=16", "ALIYUN_COM_GPU_MEM_POD=8"}},
		// Two GPUs of 2048 MiB each: CONTAINER is 4 GiB in all, DEV the
		// smaller GPU, 15360/1024 = 15.
		"two GPUs": {pod: asking(aliyunMemory, 4), alloc: on(2048, 2048), unitMiB: 1024, gpuMiB: []int64{16384, 15360},
			want: []string{"ALIYUN_COM_GPU_MEM_IDX=2,3", "ALIYUN_COM_GPU_MEM_CONTAINER=4", "ALIYUN_COM_GPU_MEM_DEV=15", "ALIYUN_COM_GPU_MEM_POD=4"}},
		"another resource":      {pod: asking("gpushare.io/gpu-mem", 3072), alloc: on(3072), unitMiB: 1024, gpuMiB: []int64{15360}},
		"not a Memory resource": {pod: asking(aliyunMemory, 3), alloc: on(3072), gpuMiB: []int64{15360}},
		"a GPU not on the node": {pod: asking(aliyunMemory, 3), alloc: on(3072), unitMiB: 1024},
	} {
		t.Run(name, func(t *testing.T) {
			got := aliyunEnv(tc.pod, "main", tc.alloc, tc.unitMiB, tc.gpuMiB)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("aliyunEnv (-want,+got):\n%s", diff)
			}
		})
	}
}

// Through the kubelet and the runtime: a container that asks
// aliyun.com/gpu-mem sees Aliyun's variables in its namespace's unit, one
// that asks gpushare.io/gpu-mem does not.
