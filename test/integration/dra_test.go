package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/dra"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// draShareClass is the DeviceClass of a share of one of gpushare's GPUs.
const draShareClass = "gpu.gpushare.io"

// TestDRADevicesShareOneGPU: the devices gpushare describes for a GPU are
// accepted by a 1.37 API server as a ResourceSlice, and stock
// kube-scheduler's DRA allocator shares one GPU among claims of several
// sizes up to its usable memory and no further: a claim that would go
// past it stays Pending, and gets the GPU once a holder is gone. A claim
// that names no capacity takes all the GPU's memory.
func TestDRADevicesShareOneGPU(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	createNodes(t, client, controlplane.NodeSpec{Name: "dra-0", Bare: true})
	if _, err := c.StartScheduler(ctx, "kube-scheduler", tools.Bin("kube-scheduler"), []byte(stockSchedulerConfig)); err != nil {
		t.Fatal(err)
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: draShareClass}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.gpushare.io"`}}},
	}}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// One T4: 15360 MiB, of which 14930 usable.
	t4 := gpu.Device{Index: 0, UUID: "GPU-dra-0", Model: "Tesla T4", MemoryMiB: 15360, UsableMemoryMiB: 14930, NUMANode: -1, Healthy: true}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "dra-0-gpu.gpushare.io"}, Spec: resourceapi.ResourceSliceSpec{
		Driver:   dra.Driver,
		Pool:     resourceapi.ResourcePool{Name: "dra-0", ResourceSliceCount: 1},
		NodeName: ptr.To("dra-0"),
		Devices:  dra.Devices([]gpu.Device{t4}, dra.Options{}),
	}}
	created, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the API server refuses gpushare's devices: %v", err)
	}
	if d := created.Spec.Devices[0]; d.AllowMultipleAllocations == nil || d.Capacity[dra.Memory].RequestPolicy == nil {
		t.Fatalf("the API server dropped consumable capacity from the device: %+v", d)
	}

	// 6 + 4 + 4 GiB = 14336 MiB fit the 14930 usable; 1 GiB more does not.
	for _, s := range []struct {
		name string
		mib  int64
	}{{"six", 6144}, {"four-a", 4096}, {"four-b", 4096}} {
		draPod(t, client, s.name, s.mib)
		waitBound(t, client, s.name)
	}
	consumed := map[string]int64{}
	for _, name := range []string{"six", "four-a", "four-b"} {
		share := claimShare(t, client, name, t4)
		consumed[name] = share.MemoryMiB
		if share.ComputePercent != 0 {
			t.Errorf("claim %s consumed %d%% compute; want the default, none", name, share.ComputePercent)
		}
	}
	if consumed["six"] != 6144 || consumed["four-a"] != 4096 || consumed["four-b"] != 4096 {
		t.Errorf("consumed MiB %v; want what each claim asked", consumed)
	}
	draPod(t, client, "one", 1024)
	// The scheduler has tried it: a FailedScheduling event names the claim.
	failedSchedulingMessage(t, client, "default", "one", "claim")
	if p, err := client.CoreV1().Pods("default").Get(ctx, "one", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("a claim past the GPU's usable memory: pod on %q (%v); want Pending", p.Spec.NodeName, err)
	}

	// Once a holder is gone its claim is deallocated, and the waiting
	// claim gets the GPU.
	if err := client.CoreV1().Pods("default").Delete(ctx, "four-a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, client, "one")
	if s := claimShare(t, client, "one", t4); s.MemoryMiB != 1024 {
		t.Errorf("claim one consumed %d MiB; want 1024", s.MemoryMiB)
	}

	// A claim that names no capacity asks for all of it: it waits while
	// any share is held, and gets the whole GPU once none is.
	draPod(t, client, "whole", 0)
	failedSchedulingMessage(t, client, "default", "whole", "claim")
	for _, name := range []string{"six", "four-b", "one"} {
		if err := client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	waitBound(t, client, "whole")
	if s := claimShare(t, client, "whole", t4); s.MemoryMiB != 14930 {
		t.Errorf("claim whole consumed %+v; want all 14930 MiB", s)
	}
}

// draPod creates a ResourceClaim for mib of one GPU (none: the whole GPU)
// and a pod that uses it.
func draPod(t *testing.T, client kubernetes.Interface, name string, mib int64) {
	t.Helper()
	ctx := context.Background()
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: draShareClass}
	if mib > 0 {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{
			dra.Memory: *k8sresource.NewQuantity(mib<<20, k8sresource.BinarySI),
		}}
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: resourceapi.ResourceClaimSpec{
		Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}}},
	}}
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}},
		Containers: []corev1.Container{{Name: "main", Image: "example.com/cuda", Resources: corev1.ResourceRequirements{
			Claims: []corev1.ResourceClaim{{Name: "gpu"}},
		}}},
	}}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitBound waits up to 60 s for pod default/name to be bound.
func waitBound(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	err := waitFor(60*time.Second, func() (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", err
	})
	if err != nil {
		var notes []string
		if evs, lerr := client.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{}); lerr == nil {
			for _, e := range evs.Items {
				if e.Regarding.Name == name {
					notes = append(notes, e.Reason+": "+e.Note)
				}
			}
		}
		if claims, lerr := client.ResourceV1().ResourceClaims("default").List(context.Background(), metav1.ListOptions{}); lerr == nil {
			for _, c := range claims.Items {
				t.Logf("claim %s: %+v", c.Name, c.Status)
			}
		}
		t.Fatalf("pod %s not bound: %v; its events: %q", name, err, notes)
	}
}

// claimShare reads what claim default/name's allocation consumed of GPU g.
func claimShare(t *testing.T, client kubernetes.Interface, name string, g gpu.Device) dra.Share {
	t.Helper()
	claim, err := client.ResourceV1().ResourceClaims("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s: allocation %+v; want one device", name, claim.Status.Allocation)
	}
	r := claim.Status.Allocation.Devices.Results[0]
	if r.ShareID == nil {
		t.Errorf("claim %s holds %s without a share ID: not a shared allocation", name, r.Device)
	}
	s, err := dra.Consumed(r, g)
	if err != nil {
		t.Fatal(fmt.Errorf("claim %s: %w", name, err))
	}
	return s
}
