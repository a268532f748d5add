package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/dra"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// The DRA modes: each pod asks its GPU memory through a ResourceClaim of
// gpushare's devices (a share of one device's memory), published per
// node in a ResourceSlice as gpushare-dra publishes it.
//
//   - dra: gpushare-scheduler, whose policy chooses the node and
//     DynamicResources the device (docs/dra.md);
//   - dra-stock: stock kube-scheduler and its DRA allocator.
func isDRA(mode string) bool { return mode == "dra" || mode == "dra-stock" }

// baseline is the mode a mode's pods/s is compared with.
func baseline(mode string) string {
	if isDRA(mode) {
		return "dra-stock"
	}
	return "stock"
}

// createDeviceClass creates the DeviceClass of gpushare's devices, as the
// chart's dra.enabled does.
func createDeviceClass(ctx context.Context, client kubernetes.Interface) error {
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: claim.Class}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + claim.Driver + `"`}}},
	}}
	_, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{})
	return err
}

// createSlice publishes node s's GPUs, all memory usable.
func createSlice(ctx context.Context, client kubernetes.Interface, s controlplane.NodeSpec) error {
	inv := s.Inventory()
	gpus := make([]gpu.Device, len(inv.GPUs))
	for i, g := range inv.GPUs {
		gpus[i] = gpu.Device{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB, UsableMemoryMiB: g.MemoryMiB,
			NUMANode: g.NUMANode, NVLinkPeers: g.NVLinkPeers, Healthy: true}
	}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: s.Name + "-" + claim.Driver}, Spec: resourceapi.ResourceSliceSpec{
		Driver: claim.Driver, Pool: resourceapi.ResourcePool{Name: s.Name, ResourceSliceCount: 1}, NodeName: &s.Name,
		Devices: dra.Devices(gpus, dra.Options{}),
	}}
	_, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
	return err
}

// createClaimPod creates pod i's claim of mib of one device, then the pod.
func createClaimPod(ctx context.Context, client kubernetes.Interface, i int, mib int64) error {
	name := fmt.Sprintf("pod-%05d", i)
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: claim.Class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{
					dra.Memory: *k8sresource.NewQuantity(mib<<20, k8sresource.BinarySI)}}}}}}}}
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		return err
	}
	pod := benchPod(i, "", 0)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	_, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	return err
}
