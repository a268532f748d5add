package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/dra"
	gpurecord "github.com/gpushare/gpushare/pkg/record"
)

// TestDRASliceCountsAdoptedPods: a pod the Aliyun system placed before
// gpushare took over (its ALIYUN_COM_GPU_MEM_IDX record, 2 GiB of GPU 0)
// books its share in gpushare-dra's ResourceSlice, as the scheduler
// books it: stock kube-scheduler's DRA allocator does not hand a claim
// the memory the pod holds, and allocates it once the pod has ended.
// Before the one reader, the driver read gpushare's own records only and
// offered the GPU whole.
func TestDRASliceCountsAdoptedPods(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	spec := controlplane.NodeSpec{Name: "dra-0", Model: "Tesla T4", MemoryMiB: 15360, Count: 1}
	createNodes(t, client, controlplane.NodeSpec{Name: spec.Name, Bare: true})
	if _, err := c.StartScheduler(ctx, "kube-scheduler", tools.Bin("kube-scheduler"), []byte(stockSchedulerConfig)); err != nil {
		t.Fatal(err)
	}
	applyDeviceClasses(t, client)

	// The Aliyun pod: 2 GiB on GPU 0, bound as its extender bound it.
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "aliyun", Namespace: "default",
		Annotations: map[string]string{gpurecord.AliyunIndex: "0", gpurecord.AliyunPod: "2"}},
		Spec: corev1.PodSpec{NodeName: spec.Name, Containers: []corev1.Container{{Name: "main", Image: "example.com/cuda",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				gpurecord.AliyunMemory: *k8sresource.NewQuantity(2, k8sresource.DecimalSI)}}}}}}
	if _, err := client.CoreV1().Pods("default").Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	sim := filepath.Join(dir, "gpus.yaml")
	if err := os.WriteFile(sim, []byte(spec.SimulatedGPUs()), 0o600); err != nil {
		t.Fatal(err)
	}
	// The kubelet's registration directory, which the kubelet makes.
	if err := os.MkdirAll(filepath.Join(dir, "registry"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = c.Run("gpushare-dra", commandBin(t, "gpushare-dra"), "--kubeconfig="+c.Kubeconfig, "--node-name="+spec.Name,
		"--simulated-gpus="+sim, "--cdi-dir="+filepath.Join(dir, "cdi"), "--plugin-dir="+filepath.Join(dir, "plugin"),
		"--registry-dir="+filepath.Join(dir, "registry"), "--health-bind-address=")
	if err != nil {
		t.Fatal(err)
	}

	// 15360 MiB, less the 2048 the Aliyun pod holds.
	waitSliceMemory(t, client, spec.Name, 15360-2048)

	// 14000 MiB fits the GPU, not beside the Aliyun pod; 12000 does.
	draPod(t, client, "past", 14000)
	failedSchedulingMessage(t, client, "default", "past", "claim")
	draPod(t, client, "beside", 12000)
	waitBound(t, client, "beside")

	// The Aliyun pod ends: its share is offered again, less the claim's
	// (the driver publishes the GPU's memory; the allocator subtracts
	// what claims consume).
	done, err := client.CoreV1().Pods("default").Get(ctx, "aliyun", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done.Status.Phase = corev1.PodSucceeded
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSliceMemory(t, client, spec.Name, 15360)
	if err := client.CoreV1().Pods("default").Delete(ctx, "beside", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, client, "past")
}

// waitSliceMemory waits until node's ResourceSlice of gpushare's driver
// offers mib MiB of memory on its one device.
func waitSliceMemory(t *testing.T, client kubernetes.Interface, node string, mib int64) {
	t.Helper()
	var got []resourceapi.Device
	err := waitFor(60*time.Second, func() (bool, error) {
		slices, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range slices.Items {
			if s.Spec.Driver != dra.Driver || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
				continue
			}
			got = s.Spec.Devices
			if len(got) == 1 {
				q := got[0].Capacity[dra.Memory].Value
				return q.Value() == mib<<20, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("node %s's slice offers %+v; want one device of %d MiB", node, got, mib)
	}
}
