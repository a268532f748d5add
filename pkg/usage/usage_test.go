package usage

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpu/sim"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

func TestPodUIDFromCgroup(t *testing.T) {
	for line, want := range map[string]types.UID{
		"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_aaaa_bbbb_cccc_0123456789ab.slice/cri-containerd-42.scope": "1b2c3d4e-aaaa-bbbb-cccc-0123456789ab",
		"12:memory:/kubepods/besteffort/pod1b2c3d4e-aaaa-bbbb-cccc-0123456789ab/0f0f":                                                          "1b2c3d4e-aaaa-bbbb-cccc-0123456789ab",
		"0::/system.slice/sshd.service": "",
	} {
		got, ok := PodUIDFromCgroup(line)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", line, got, ok, want)
		}
	}
}

// The metrics match the simulated GPUs: totals, live use, the pod's own
// processes against its allocation, and memory used outside any pod.
func TestCollector(t *testing.T) {
	b, err := sim.New(&sim.Config{
		GPUs: []sim.Group{{Model: "Tesla T4", MemoryMiB: 15360, Count: 2}},
		Usage: []sim.Load{{Index: 1, UtilizationPercent: 40, UsedMemoryMiB: 5000, TemperatureC: 61, PowerWatts: 52.5,
			Processes: []gpu.Process{{PID: 100, UsedMemoryMiB: 3000}, {PID: 200, UsedMemoryMiB: 2000}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := b.Devices()
	a := &gpusharev1.Allocation{Node: "n1", Containers: []gpusharev1.ContainerAllocation{{Name: "main", Kind: gpusharev1.ContainerApp,
		GPUs: []gpusharev1.GPUShare{{Index: 1, UUID: devs[1].UUID, MemoryMiB: 4096, Compute: 30}}}}}
	value, err := gpusharev1.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: "ml", UID: "u1",
		Annotations: map[string]string{gpusharev1.AllocationAnnotation: value}}, Spec: corev1.PodSpec{NodeName: "n1"}}
	// A pod that ended holds nothing; one the Aliyun system placed holds
	// what its record says, as the scheduler books it.
	done := pod.DeepCopy()
	done.Name, done.UID, done.Status.Phase = "done", "u2", corev1.PodSucceeded
	aliyun := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "ml", UID: "u3",
		Annotations: map[string]string{record.AliyunIndex: "0"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{record.AliyunMemory: *k8sresource.NewQuantity(2, k8sresource.DecimalSI)}}}}}}
	model, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{Backend: b, Logger: klog.Background(), Node: "n1", Reader: record.Reader{Requests: model.PodRequest},
		Pods:  func() []*corev1.Pod { return []*corev1.Pod{pod, done, aliyun} },
		PodOf: func(pid int) (types.UID, bool) { return "u1", pid == 100 }}
	u1 := devs[1].UUID
	// 4096 MiB allocated = 4294967296 bytes; the pod's process uses 3000
	// MiB, a process of no pod 2000 MiB.
	want := `
# HELP gpushare_container_gpu_memory_allocated_bytes GPU memory the container's allocation record gives it.
# TYPE gpushare_container_gpu_memory_allocated_bytes gauge
gpushare_container_gpu_memory_allocated_bytes{container="app",gpu="0",namespace="ml",pod="old",uuid="` + devs[0].UUID + `"} 2.147483648e+09
gpushare_container_gpu_memory_allocated_bytes{container="main",gpu="1",namespace="ml",pod="infer",uuid="` + u1 + `"} 4.294967296e+09
# HELP gpushare_node_gpu_memory_used_outside_pods_bytes GPU memory used by processes that belong to no pod of this node (e.g. outside Kubernetes).
# TYPE gpushare_node_gpu_memory_used_outside_pods_bytes gauge
gpushare_node_gpu_memory_used_outside_pods_bytes{gpu="0",model="Tesla T4",uuid="` + devs[0].UUID + `"} 0
gpushare_node_gpu_memory_used_outside_pods_bytes{gpu="1",model="Tesla T4",uuid="` + u1 + `"} 2.097152e+09
# HELP gpushare_node_gpu_utilization_ratio Share of time a kernel ran on the GPU over the driver's sample period, 0 to 1.
# TYPE gpushare_node_gpu_utilization_ratio gauge
gpushare_node_gpu_utilization_ratio{gpu="0",model="Tesla T4",uuid="` + devs[0].UUID + `"} 0
gpushare_node_gpu_utilization_ratio{gpu="1",model="Tesla T4",uuid="` + u1 + `"} 0.4
# HELP gpushare_pod_gpu_memory_used_bytes GPU memory used by the pod's processes.
# TYPE gpushare_pod_gpu_memory_used_bytes gauge
gpushare_pod_gpu_memory_used_bytes{gpu="1",namespace="ml",pod="infer",uuid="` + u1 + `"} 3.145728e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"gpushare_container_gpu_memory_allocated_bytes", "gpushare_node_gpu_memory_used_outside_pods_bytes",
		"gpushare_node_gpu_utilization_ratio", "gpushare_pod_gpu_memory_used_bytes"); err != nil {
		t.Error(err)
	}
	if err := b.SetHealth(0, false, "XID 79"); err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP gpushare_node_gpu_healthy 1 if the GPU is healthy, 0 after a fatal error.
# TYPE gpushare_node_gpu_healthy gauge
gpushare_node_gpu_healthy{gpu="0",model="Tesla T4",uuid="`+devs[0].UUID+`"} 0
gpushare_node_gpu_healthy{gpu="1",model="Tesla T4",uuid="`+u1+`"} 1
`), "gpushare_node_gpu_healthy"); err != nil {
		t.Error(err)
	}
}
