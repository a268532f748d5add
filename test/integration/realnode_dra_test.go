package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/dra"
	"github.com/gpushare/gpushare/pkg/refused"
)

// TestRealNodeDRA: with dra.enabled, gpushare-dra runs beside
// gpushare-node from the chart's image, registers with the real kubelet,
// and publishes the node's four GPUs; claims of 8 GiB and 25% compute,
// of 4 GiB, and of no capacity (all the memory) are allocated by the
// scheduler and prepared by the driver, and each container, asked from
// inside, sees exactly its claim's GPU (its UUID, its device node) with
// the share the claim consumed. A deleted pod's claim is unprepared: its
// CDI spec goes. The daemon's own token may not publish devices for
// another node or another driver.
func TestRealNodeDRA(t *testing.T) {
	rc := startRealCluster(t, "--set", "dra.enabled=true",
		"--set-json", `dra.extraArgs=["--simulated-gpus=/etc/gpushare-sim/gpus.yaml"]`,
		"--set-json", `dra.extraVolumeMounts=[{"name":"sim","mountPath":"/etc/gpushare-sim","readOnly":true}]`)
	ctx := context.Background()
	// The driver's slice: four devices, and the UUID of each.
	uuids := map[string]string{}
	err := waitFor(2*time.Minute, func() (bool, error) {
		list, err := rc.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range list.Items {
			if s.Spec.Driver != dra.Driver || s.Spec.NodeName == nil || *s.Spec.NodeName != "gpu-real" {
				continue
			}
			for _, d := range s.Spec.Devices {
				uuids[d.Name] = *d.Attributes[dra.AttrUUID].StringValue
			}
		}
		return len(uuids) == 4, nil
	})
	if err != nil {
		t.Fatalf("gpushare-dra did not publish the real node's 4 GPUs: %v (devices %v)", err, uuids)
	}

	claims := []struct {
		name         string
		mib, percent int64
	}{{"share-a", 8192, 25}, {"share-b", 4096, 0}, {"whole", 0, 0}}
	for _, c := range claims {
		req := &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpushare.io"}
		if c.mib > 0 {
			req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{
				dra.Memory: *k8sresource.NewQuantity(c.mib<<20, k8sresource.BinarySI)}}
			if c.percent > 0 {
				req.Capacity.Requests[dra.Compute] = *k8sresource.NewQuantity(c.percent, k8sresource.DecimalSI)
			}
		}
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "default"}, Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}}}}}
		if _, err := rc.client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "default"}, Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(c.name)}},
			Containers: []corev1.Container{{Name: "main", Image: probeImage, Command: []string{"sleep", "infinity"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		}}
		if _, err := rc.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rc.runningPods(t, len(claims))

	specs := map[string]string{}
	held := map[string]string{} // claim name: its device
	for _, c := range claims {
		claim, err := rc.client.ResourceV1().ResourceClaims("default").Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("claim %s: allocation %+v; want one device", c.name, claim.Status.Allocation)
		}
		r := claim.Status.Allocation.Devices.Results[0]
		uuid := uuids[r.Device]
		held[c.name] = r.Device
		wantMiB := c.mib
		if wantMiB == 0 {
			q := r.ConsumedCapacity[dra.Memory]
			wantMiB = q.Value() >> 20
		}
		got := rc.report(t, "default", c.name, "main")
		want := map[string]string{"NVIDIA_VISIBLE_DEVICES": uuid, "GPUSHARE_GPU_MEMORY_MIB": fmt.Sprint(wantMiB),
			"GPUSHARE_GPU_COMPUTE_PERCENT": fmt.Sprint(c.percent)}
		for k, v := range want {
			if got.Env[k] != v {
				t.Errorf("%s (device %s): %s=%q; want %q", c.name, r.Device, k, got.Env[k], v)
			}
		}
		index := strings.TrimPrefix(r.Device, "gpu-")
		if len(got.Devices) != 1 || !strings.HasPrefix(got.Devices[0], "nvidia"+index+" ") {
			t.Errorf("%s (device %s): sees device nodes %v; want nvidia%s alone", c.name, r.Device, got.Devices, index)
		}
		if c.mib == 0 && wantMiB < 30000 {
			t.Errorf("%s consumed %d MiB; want all of a 32 GiB GPU's usable memory", c.name, wantMiB)
		}
		specs[c.name] = filepath.Join(rc.node.CDIDir, "gpushare-dra-"+string(claim.UID)+"-gpu.json")
		t.Logf("%s holds %s (%s): %s", c.name, r.Device, uuid, got.Env["GPUSHARE_GPU_MEMORY_MIB"])
	}
	for name, spec := range specs {
		if _, err := os.Stat(spec); err != nil {
			t.Errorf("claim %s prepared, and its CDI spec: %v", name, err)
		}
	}

	// The pod goes, the kubelet unprepares its claim: the spec goes.
	if err := rc.client.CoreV1().Pods("default").Delete(ctx, "share-a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	err = waitFor(2*time.Minute, func() (bool, error) {
		_, err := os.Stat(specs["share-a"])
		return errors.Is(err, os.ErrNotExist), nil
	})
	if err != nil {
		t.Errorf("share-a's pod deleted, its claim's spec %s is still there: %v", specs["share-a"], err)
	}
	if _, err := os.Stat(specs["share-b"]); err != nil {
		t.Errorf("share-b's spec went with share-a's pod: %v", err)
	}

	// A pod that books 30000 MiB of a GPU through extended resources:
	// gpushare-dra publishes that GPU with 30000 MiB less for claims, so a
	// claim for 8 GiB of it is not allocated, and its pod waits. (Should
	// an allocation race ahead of the slice, the node refuses to prepare
	// it: TestPrepareCountsPodBookings.)
	big := gpuPod("big", 30000, 0)
	big.Spec.Containers[0].Image, big.Spec.Containers[0].Command = probeImage, []string{"sleep", "infinity"}
	if _, err := rc.client.CoreV1().Pods("default").Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bigUUID := ""
	for _, p := range rc.runningPods(t, len(claims)) { // share-a is gone, big is in
		if p.Name == "big" {
			bigUUID = record(t, &p).Containers[0].GPUs[0].UUID
		}
	}
	// Before the claim: one allocated against the slice as it was
	// would be refused by the node instead, a race this test is not about.
	err = waitFor(time.Minute, func() (bool, error) {
		list, err := rc.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, sl := range list.Items {
			for _, d := range sl.Spec.Devices {
				if sl.Spec.Driver == dra.Driver && *d.Attributes[dra.AttrUUID].StringValue == bigUUID {
					free := d.Capacity[dra.Memory].Value
					return free.Value()>>20 == *d.Attributes[dra.AttrMemoryMiB].IntValue-30000, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("the slice does not take big's 30000 MiB off its GPU's memory for claims: %v", err)
	}
	over := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "over", Namespace: "default"}, Spec: resourceapi.ResourceClaimSpec{
		Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "gpu.gpushare.io",
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["gpu.gpushare.io"].uuid == %q`, bigUUID)}}},
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{
				dra.Memory: *k8sresource.NewQuantity(8192<<20, k8sresource.BinarySI)}},
		}}}}}}
	if _, err := rc.client.ResourceV1().ResourceClaims("default").Create(ctx, over, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	overPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "over", Namespace: "default"}, Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("over")}},
		Containers: []corev1.Container{{Name: "main", Image: probeImage, Command: []string{"sleep", "infinity"},
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
	}}
	if _, err := rc.client.CoreV1().Pods("default").Create(ctx, overPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventNoteWithin(t, realNodeEventWait, rc.client, "default", "over", "FailedScheduling", "claim")
	if p, err := rc.client.CoreV1().Pods("default").Get(ctx, "over", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("a claim past what its GPU's pods leave: pod on %q (%v); want it Pending", p.Spec.NodeName, err)
	}
	if c, err := rc.client.ResourceV1().ResourceClaims("default").Get(ctx, "over", metav1.GetOptions{}); err != nil || c.Status.Allocation != nil {
		t.Errorf("claim over allocated %+v (%v); want none", c.Status.Allocation, err)
	}

	lateRecordBesideClaim(t, rc, held["share-b"], uuids[held["share-b"]])

	// The hostile case: gpushare-node's token, bound to its pod, writes a
	// slice for another node, and one of another driver for its own.
	pods, err := rc.client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("gpushare-node's pod: %v, %v", pods, err)
	}
	kubeconfig, err := rc.c.AccountKubeconfig(ctx, chartNamespace, "gpushare-node", &pods.Items[0], time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	daemon := clientFor(t, kubeconfig)
	for name, s := range map[string]resourceapi.ResourceSliceSpec{
		"another node":   {Driver: dra.Driver, NodeName: ptr.To("gpu-other"), Pool: resourceapi.ResourcePool{Name: "gpu-other", ResourceSliceCount: 1}},
		"another driver": {Driver: "gpu.nvidia.com", NodeName: ptr.To("gpu-real"), Pool: resourceapi.ResourcePool{Name: "gpu-real", ResourceSliceCount: 1}},
	} {
		slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-"}, Spec: s}
		_, err := daemon.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "gpushare-dra may write only") {
			t.Errorf("%s: the node daemon's token created a slice (%v); want it forbidden by gpushare-node-dra", name, err)
		}
	}
	all, err := rc.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(all.Items, func(s resourceapi.ResourceSlice) bool { return strings.HasPrefix(s.Name, "forged-") }) {
		t.Error("a forged slice is in the cluster")
	}
}

// lateRecordBesideClaim: the race the other way, a pod whose record
// reaches the node after a claim on its GPU was prepared (the scheduler
// placed it from a view without the claim). Played here by binding the
// pod as gpushare-scheduler would, with a record of 30000 MiB of the GPU
// on which claim share-b's 4096 MiB are prepared: gpushare-node refuses
// the pod's container as it starts (the kubelet's Failed event names the
// claims prepared first), though its init container, which asks no GPU,
// ran; the claim's pod runs on; a claim on another GPU made meanwhile is
// never refused for the over-committed one, and its pod runs; and
// gpushare-scheduler deletes the refused pod after the grace, saying why.
func lateRecordBesideClaim(t *testing.T, rc *realCluster, device, gpuUUID string) {
	t.Helper()
	ctx := context.Background()
	index, err := strconv.Atoi(strings.TrimPrefix(device, "gpu-"))
	if err != nil {
		t.Fatalf("share-b's device %q: %v", device, err)
	}
	late := gpuPod("late", 30000, 0)
	late.Spec.SchedulerName = "no-scheduler" // bound below, as gpushare-scheduler binds
	late.Spec.Containers[0].Image, late.Spec.Containers[0].Command = probeImage, []string{"sleep", "infinity"}
	late.Spec.InitContainers = []corev1.Container{{Name: "init", Image: probeImage, Command: []string{"sleep", "1"}}}
	created, err := rc.client.CoreV1().Pods("default").Create(ctx, late, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	value, err := gpusharev1.Marshal(&gpusharev1.Allocation{Node: "gpu-real", Containers: []gpusharev1.ContainerAllocation{{
		Name: "main", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{{Index: index, UUID: gpuUUID, MemoryMiB: 30000}}}}})
	if err != nil {
		t.Fatal(err)
	}
	schedulers, err := rc.client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gpushare-scheduler"})
	if err != nil || len(schedulers.Items) != 1 {
		t.Fatalf("gpushare-scheduler's pod: %v, %v", schedulers, err)
	}
	kubeconfig, err := rc.c.AccountKubeconfig(ctx, chartNamespace, "gpushare-scheduler", &schedulers.Items[0], time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := clientFor(t, kubeconfig).CoreV1().Pods("default").Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "default", UID: created.UID,
			Annotations: map[string]string{gpusharev1.AllocationAnnotation: value}},
		Target: corev1.ObjectReference{Kind: "Node", Name: "gpu-real"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding late as gpushare-scheduler: %v", err)
	}
	eventNoteWithin(t, realNodeEventWait, rc.client, "default", "late", refused.KubeletFailed, refused.BesideWords)
	if p, err := rc.client.CoreV1().Pods("default").Get(ctx, "share-b", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Errorf("share-b, whose claim was prepared first: %v (%v); want it running", p.Status.Phase, err)
	}
	// Meanwhile a claim on another GPU: the over-committed one is not its
	// concern.
	other := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "default"}, Spec: resourceapi.ResourceClaimSpec{
		Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "gpu.gpushare.io",
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["gpu.gpushare.io"].uuid != %q`, gpuUUID)}}},
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{
				dra.Memory: *k8sresource.NewQuantity(1024<<20, k8sresource.BinarySI)}},
		}}}}}}
	if _, err := rc.client.ResourceV1().ResourceClaims("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	elsewhere := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "default"}, Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("elsewhere")}},
		Containers: []corev1.Container{{Name: "main", Image: probeImage, Command: []string{"sleep", "infinity"},
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
	}}
	if _, err := rc.client.CoreV1().Pods("default").Create(ctx, elsewhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its Prepare is never refused for the over-committed GPU (a busy
	// apiserver may delay it past the refused pod's release: the check is
	// the refusal, not the timing).
	err = waitFor(2*time.Minute, func() (bool, error) {
		p, err := rc.client.CoreV1().Pods("default").Get(ctx, "elsewhere", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Errorf("a claim on another GPU: its pod is not running: %v", err)
	}
	evs, err := rc.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == refused.KubeletRefusal && strings.Contains(e.Message, "would hold") {
			t.Errorf("a claim on another GPU was refused for the over-committed one: %s", e.Message)
		}
	}
	eventNoteWithin(t, realNodeEventWait, rc.client, "default", "late", refused.Reason, "allocation record books GPU "+strconv.Itoa(index))
	err = waitFor(time.Minute, func() (bool, error) {
		_, err := rc.client.CoreV1().Pods("default").Get(ctx, "late", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the refused pod was not deleted: %v", err)
	}
}
