package integration

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/dra"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// TestDRAClaimBookedWhereAllocated: DRA's allocator picks a GPU from the
// node's ResourceSlice, which may not yet count a pod bound a moment ago
// (gpushare-dra republishes it after the pod's record is written). Here
// the slice offers only the GPU an extended-resource pod just filled,
// while gpushare's policy would put the claim on the other, empty GPU.
// gpushare-scheduler books the GPU DRA allocated, not the one its policy
// chose: the allocation does not fit beside the pod's record, so the
// claim pod is refused before it binds (with the reason), and once the
// slice counts the pod, the claim lands where it fits. No GPU is
// over-committed at any point; before, the claim was allocated the full
// GPU and the node refused to prepare it, the GPU shown over-committed.
func TestDRAClaimBookedWhereAllocated(t *testing.T) {
	ctx := context.Background()
	_, client, _ := startPlugin(t, schedulerConfigWith(t, "binpack"))
	spec := controlplane.NodeSpec{Name: "two", Model: "Tesla T4", MemoryMiB: 15360, Count: 2}
	createNodes(t, client, spec)
	applyDeviceClasses(t, client)
	var gpus []gpu.Device
	for _, g := range spec.Inventory().GPUs {
		gpus = append(gpus, gpu.Device{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
			UsableMemoryMiB: g.MemoryMiB, NUMANode: g.NUMANode, Healthy: true})
	}

	// The extended-resource pod: 12000 MiB of one GPU, x.
	if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("ext", 12000, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	x := record(t, boundPod(t, client, "default", "ext")).Containers[0].GPUs[0].Index
	// A slice that does not count it yet, offering GPU x alone.
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: spec.Name + "-gpu.gpushare.io"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: dra.Driver, Pool: resourceapi.ResourcePool{Name: spec.Name, ResourceSliceCount: 1}, NodeName: ptr.To(spec.Name),
		Devices: dra.Devices([]gpu.Device{gpus[x]}, dra.Options{}),
	}}
	slice, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// 8192 MiB by claim: the policy would take the empty GPU; DRA can
	// only allocate GPU x, which has 3360 MiB left beside the pod.
	draPod(t, client, "claim", 8192)
	failedSchedulingMessage(t, client, "default", "claim", "do not fit beside what gpushare books")
	assertClaimsFit(t, client, spec.Name, 15360)

	// The slice counts the pod now, as gpushare-dra publishes it: the
	// claim goes to the other GPU.
	slice.Spec.Devices = dra.DevicesBeside(gpus, dra.Options{}, map[string]dra.Share{gpus[x].UUID: {MemoryMiB: 12000}})
	if _, err := client.ResourceV1().ResourceSlices().Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, client, "claim")
	rc, err := client.ResourceV1().ResourceClaims("default").Get(ctx, "claim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := rc.Status.Allocation.Devices.Results; len(r) != 1 || r[0].Device == dra.DeviceName(x) {
		t.Errorf("claim allocated %+v; want the GPU other than %d", r, x)
	}
	assertClaimsFit(t, client, spec.Name, 15360)
}

// assertClaimsFit fails the test where node's pods' records and its
// allocated claims together take a GPU past mib MiB.
func assertClaimsFit(t *testing.T, client kubernetes.Interface, node string, mib int64) {
	t.Helper()
	ctx := context.Background()
	booked := map[string]int64{}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if _, ok := p.Annotations[gpusharev1.AllocationAnnotation]; !ok || p.Spec.NodeName != node {
			continue
		}
		for _, c := range record(t, p).Containers {
			for _, g := range c.GPUs {
				booked[dra.DeviceName(g.Index)] += g.MemoryMiB
			}
		}
	}
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range claims.Items {
		if a := claims.Items[i].Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				if r.Pool == node && strings.HasPrefix(r.Device, "gpu-") {
					q := r.ConsumedCapacity[dra.Memory]
					booked[r.Device] += q.Value() >> 20
				}
			}
		}
	}
	for dev, got := range booked {
		if got > mib {
			t.Errorf("node %s device %s: records and claims book %d MiB of %d", node, dev, got, mib)
		}
	}
}
