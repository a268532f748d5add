package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
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
	t.Parallel()
	ctx := context.Background()
	client := draCluster(t)
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
// and a pod that uses it, changed by each of edit.
func draPod(t *testing.T, client kubernetes.Interface, name string, mib int64, edit ...func(*corev1.Pod)) {
	t.Helper()
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: draShareClass}
	if mib > 0 {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{
			dra.Memory: *k8sresource.NewQuantity(mib<<20, k8sresource.BinarySI),
		}}
	}
	claimPod(t, client, name, resourceapi.DeviceRequest{Name: "gpu", Exactly: req}, edit...)
}

// claimPod creates a ResourceClaim name of request r and a pod name
// that uses it, changed by each of edit.
func claimPod(t *testing.T, client kubernetes.Interface, name string, r resourceapi.DeviceRequest, edit ...func(*corev1.Pod)) {
	t.Helper()
	ctx := context.Background()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: resourceapi.ResourceClaimSpec{
		Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}},
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
	for _, e := range edit {
		e(pod)
	}
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

// TestDRAExamples: the seed workloads' shapes as claims (examples/dra),
// applied unchanged, are all allocated on a node of gpushare's devices
// by stock kube-scheduler: each share as asked, the multi-container pod
// one share per container's request, seed 004's two whole cards two
// devices each taken whole, seed 000's share on an MPS GPU.
func TestDRAExamples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := draCluster(t)
	var gpus []gpu.Device
	for i := range 6 {
		gpus = append(gpus, gpu.Device{Index: i, UUID: fmt.Sprintf("GPU-dra-%d", i), Model: "NVIDIA A100-SXM4-40GB",
			MemoryMiB: 40960, UsableMemoryMiB: 40326, NUMANode: -1, Healthy: true})
	}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "dra-0-gpu.gpushare.io"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: dra.Driver, Pool: resourceapi.ResourcePool{Name: "dra-0", ResourceSliceCount: 1}, NodeName: ptr.To("dra-0"),
		Devices: dra.Devices(gpus, dra.Options{MPS: true}),
	}}
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "examples", "dra", "*.yaml"))
	if err != nil || len(files) != 5 {
		t.Fatalf("examples/dra: %v, %v; want the five seed shapes", files, err)
	}
	for _, f := range files {
		if err := controlplane.Apply(ctx, client, readFile(t, strings.TrimPrefix(f, root+"/"))); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	// 1 (seed 000) + 3 (001) + 3 (003) + 2 (004) + 1 (multi-container).
	var bound []corev1.Pod
	err = waitFor(2*time.Minute, func() (bool, error) {
		bound = bound[:0]
		for _, ns := range []string{"default", "userpod"} {
			pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" {
					bound = append(bound, p)
				}
			}
		}
		return len(bound) == 10, nil
	})
	if err != nil {
		t.Fatalf("%d of 10 example pods bound: %v", len(bound), err)
	}
	held := map[string]int64{}
	checked, done := 0, 0
	for _, p := range bound {
		if p.Status.Phase == corev1.PodSucceeded {
			// kwok ends a Job's pod at once, and its claim goes with
			// it: bound, it was allocated.
			done++
			continue
		}
		claims, err := client.ResourceV1().ResourceClaims(p.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, claim := range claims.Items {
			if len(claim.Status.ReservedFor) == 0 || claim.Status.ReservedFor[0].Name != p.Name {
				continue
			}
			checked++
			var got []string
			for _, r := range claim.Status.Allocation.Devices.Results {
				i, err := strconv.Atoi(strings.TrimPrefix(r.Device, "gpu-"))
				if err != nil || i < 0 || i >= len(gpus) {
					t.Fatalf("claim %s holds device %s: not one of the node's", claim.Name, r.Device)
				}
				s, err := dra.Consumed(r, gpus[i])
				if err != nil {
					t.Fatalf("%s: %v", claim.Name, err)
				}
				held[r.Device] += s.MemoryMiB
				got = append(got, fmt.Sprintf("%s:%d/%d", r.Request, s.MemoryMiB, s.ComputePercent))
			}
			slices.Sort(got)
			// Request:MiB/percent of each device, by the pod's workload.
			var want []string
			switch name := p.Name; {
			case strings.HasPrefix(name, "nbody-"):
				want = []string{"gpu:1024/10"}
			case strings.HasPrefix(name, "binpack-1-dra-"):
				want = []string{"gpu:3072/0"}
			case strings.HasPrefix(name, "gpu-test-mem-dra-"):
				want = []string{"gpu:3500/0"}
			case strings.HasPrefix(name, "cuda-gpu-test-2-dra-"):
				want = []string{"gpus:40326/0", "gpus:40326/0"}
			case strings.HasPrefix(name, "cuda-gpu-test-dra-"):
				want = []string{"gpu:256/0"}
			case name == "multi-container-dra":
				want = []string{"server:20480/50", "tokenizer:4096/10"}
			}
			if !slices.Equal(got, want) {
				t.Errorf("pod %s/%s, claim %s: %v; want %v", p.Namespace, p.Name, claim.Name, got, want)
			}
			if len(got) == 2 && claim.Status.Allocation.Devices.Results[0].Device == claim.Status.Allocation.Devices.Results[1].Device &&
				strings.HasPrefix(p.Name, "cuda-gpu-test-2") {
				t.Errorf("pod %s: both whole cards are device %s", p.Name, claim.Status.Allocation.Devices.Results[0].Device)
			}
		}
	}
	if checked+done != len(bound) || done > 1 {
		t.Errorf("%d of %d bound pods hold a claim and %d ended; want all but the Job's to hold one", checked, len(bound), done)
	}
	for dev, mib := range held {
		if mib > 40326 {
			t.Errorf("device %s: %d MiB allocated of 40326", dev, mib)
		}
	}
}

// draCluster starts a control plane with stock kube-scheduler, a kwok
// node dra-0 without GPUs of its own, and the DeviceClasses the chart
// installs with dra.enabled: the tests publish dra-0's devices
// themselves.
func draCluster(t *testing.T) kubernetes.Interface {
	t.Helper()
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	createNodes(t, client, controlplane.NodeSpec{Name: "dra-0", Bare: true})
	if _, err := c.StartScheduler(context.Background(), "kube-scheduler", tools.Bin("kube-scheduler"), []byte(stockSchedulerConfig)); err != nil {
		t.Fatal(err)
	}
	applyDeviceClasses(t, client)
	return client
}

// applyDeviceClasses applies the DeviceClasses the chart installs with
// dra.enabled, as deploy/ renders them.
func applyDeviceClasses(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	if err := controlplane.Apply(context.Background(), client, readFile(t, "deploy/dra-deviceclass.yaml")); err != nil {
		t.Fatalf("applying deploy/dra-deviceclass.yaml: %v", err)
	}
}

// TestDRAPlacedByPolicy: gpushare-scheduler places pods that ask
// gpushare's devices through ResourceClaims by its node policy (binpack
// here), and keeps one account per GPU for claims and extended-resource
// pods: a claim never lands on memory a pod's record holds, a pod never
// on memory a claim holds, though DRA's allocator and the pods' records
// each see only their own; a claim that goes frees its share for a
// waiting pod. A tenant cannot rewrite its claim's allocation or
// request.
func TestDRAPlacedByPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, client, _ := startPlugin(t, schedulerConfigWith(t, "binpack"))
	specs := []controlplane.NodeSpec{
		{Name: "a", Model: "Tesla T4", MemoryMiB: 15360, Count: 1},
		{Name: "b", Model: "Tesla T4", MemoryMiB: 15360, Count: 1},
	}
	createNodes(t, client, specs...)
	publishDevices(t, client, specs...)
	createPod := func(p *corev1.Pod) {
		t.Helper()
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodeOf := func(name string) string {
		t.Helper()
		waitBound(t, client, name)
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Spec.NodeName
	}

	// An extended-resource pod of 8 GiB goes to one node, x.
	createPod(gpuPod("ext", 8192, 0))
	x := nodeOf("ext")
	y := map[string]string{"a": "b", "b": "a"}[x]
	// Binpack puts a 4 GiB claim beside it.
	draPod(t, client, "small", 4096)
	if n := nodeOf("small"); n != x {
		t.Errorf("claim small on %s; binpack puts it on %s, beside the 8 GiB pod", n, x)
	}
	// 8 GiB more fits x by DRA's count (its slice has 11 GiB free) but
	// not beside the pod's record: y.
	draPod(t, client, "big", 8192)
	if n := nodeOf("big"); n != y {
		t.Errorf("claim big on %s; want %s: %s holds 8192 MiB by record and 4096 by claim of 15360", n, y, x)
	}
	// 6 GiB: x has 3072 MiB left, y 7168 beside claim big. By the
	// records alone x would have 7168 too, and binpack would pick it.
	createPod(gpuPod("ext2", 6144, 0))
	if n := nodeOf("ext2"); n != y {
		t.Errorf("pod ext2 on %s; want %s, the only node with 6144 MiB free counting claims", n, y)
	}
	// 2 GiB: x has 3072 free, y 1024.
	createPod(gpuPod("ext3", 2048, 0))
	if n := nodeOf("ext3"); n != x {
		t.Errorf("pod ext3 on %s; want %s", n, x)
	}
	// Nothing has room for 4 GiB until claim big goes.
	createPod(gpuPod("ext4", 4096, 0))
	failedSchedulingMessage(t, client, "default", "ext4", "")
	if p, err := client.CoreV1().Pods("default").Get(ctx, "ext4", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("pod ext4 on %q (%v); want Pending: no GPU has 4096 MiB free counting claims", p.Spec.NodeName, err)
	}
	// Each GPU's records and claims add up to at most its memory.
	booked := map[string]int64{}
	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if _, ok := pods.Items[i].Annotations[gpusharev1.AllocationAnnotation]; ok {
			for _, c := range record(t, &pods.Items[i]).Containers {
				for _, g := range c.GPUs {
					booked[pods.Items[i].Spec.NodeName] += g.MemoryMiB
				}
			}
		}
	}
	claims, err := client.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range claims.Items {
		if a := claims.Items[i].Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				q := r.ConsumedCapacity[dra.Memory]
				booked[r.Pool] += q.Value() >> 20
			}
		}
	}
	for node, mib := range booked {
		if mib > 15360 {
			t.Errorf("node %s: records and claims book %d MiB of its 15360", node, mib)
		}
	}
	t.Logf("booked MiB by records and claims: %v", booked)

	if err := client.CoreV1().Pods("default").Delete(ctx, "big", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if err := client.ResourceV1().ResourceClaims("default").Delete(ctx, "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := nodeOf("ext4"); n != y {
		t.Errorf("pod ext4 on %s; want %s, where claim big was", n, y)
	}

	// A pod that asks both through extended resources and through a
	// claim of gpushare's devices is told to ask through one: the two
	// could not be booked together.
	draPod(t, client, "mixed", 1024, func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = gpuPod("mixed", 1024, 0).Spec.Containers[0].Resources.Limits
	})
	failedSchedulingMessage(t, client, "default", "mixed", "both through extended resources and through ResourceClaims")
	// The same in every form of claim the policy cannot place itself
	// (firstAvailable, allocationMode All), and through a claim already
	// allocated to another pod (small's): refused before anything binds.
	withExtended := func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = gpuPod(p.Name, 1024, 0).Spec.Containers[0].Resources.Limits
	}
	first := resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "share", DeviceClassName: draShareClass}}}
	all := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: draShareClass,
		AllocationMode: resourceapi.DeviceAllocationModeAll}}
	for name, r := range map[string]resourceapi.DeviceRequest{"mixed-first": first, "mixed-all": all} {
		claimPod(t, client, name, r, withExtended)
		failedSchedulingMessage(t, client, "default", name, "both through extended resources and through ResourceClaims")
	}
	draPod(t, client, "mixed-reuse", 0, withExtended, func(p *corev1.Pod) {
		p.Spec.ResourceClaims[0].ResourceClaimName = ptr.To("small")
	})
	failedSchedulingMessage(t, client, "default", "mixed-reuse", "both through extended resources and through ResourceClaims")
	for _, name := range []string{"mixed", "mixed-first", "mixed-all", "mixed-reuse"} {
		if p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Errorf("pod %s on %q (%v); want Pending", name, p.Spec.NodeName, err)
		}
	}

	// The hostile tenant (the edit role in default) cannot free its
	// claim's share by rewriting its allocation, nor shrink its request.
	tenant := tenantClient(t, c, client, "default")
	small, err := tenant.ResourceV1().ResourceClaims("default").Get(ctx, "small", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := small.DeepCopy()
	forged.Status.Allocation.Devices.Results[0].ConsumedCapacity[dra.Memory] = *k8sresource.NewQuantity(1<<20, k8sresource.BinarySI)
	if _, err := tenant.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, forged, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a tenant rewrote its claim's allocation: %v; want Forbidden", err)
	}
	shrunk := small.DeepCopy()
	shrunk.Spec.Devices.Requests[0].Exactly.Capacity.Requests[dra.Memory] = *k8sresource.NewQuantity(1<<20, k8sresource.BinarySI)
	if _, err := tenant.ResourceV1().ResourceClaims("default").Update(ctx, shrunk, metav1.UpdateOptions{}); err == nil {
		t.Error("a tenant shrank its allocated claim's request; want it refused")
	}
}

// publishDevices applies the DeviceClasses of gpushare's devices and
// creates a ResourceSlice of each node's GPUs, as gpushare-dra publishes them with
// no pod there, the inventory's memory all usable.
func publishDevices(t *testing.T, client kubernetes.Interface, specs ...controlplane.NodeSpec) {
	t.Helper()
	ctx := context.Background()
	applyDeviceClasses(t, client)
	for _, s := range specs {
		var gpus []gpu.Device
		for _, g := range s.Inventory().GPUs {
			gpus = append(gpus, gpu.Device{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
				UsableMemoryMiB: g.MemoryMiB, NUMANode: g.NUMANode, Healthy: true})
		}
		slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: s.Name + "-gpu.gpushare.io"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: dra.Driver, Pool: resourceapi.ResourcePool{Name: s.Name, ResourceSliceCount: 1}, NodeName: ptr.To(s.Name),
			Devices: dra.Devices(gpus, dra.Options{}),
		}}
		if _, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDRAClaimPreempted: a pod of higher priority that asks GPU memory
// through extended resources preempts a pod whose ResourceClaim holds
// that memory (gpushare-scheduler's dry run frees the claims reserved for
// a victim alone), and binds once the claim is released; a pod of the
// same priority does not.
func TestDRAClaimPreempted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, client, _ := startPlugin(t, nil)
	node := controlplane.NodeSpec{Name: "p", Model: "Tesla T4", MemoryMiB: 15360, Count: 1}
	createNodes(t, client, node)
	publishDevices(t, client, node)
	for name, value := range map[string]int32{"gpu-low": 100, "gpu-high": 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	priority := func(class string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.PriorityClassName = class } }
	draPod(t, client, "low", 12288, priority("gpu-low"))
	waitBound(t, client, "low")
	low, err := client.CoreV1().Pods("default").Get(ctx, "low", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	same := gpuPod("same", 8192, 0)
	same.Spec.PriorityClassName = "gpu-low"
	if _, err := client.CoreV1().Pods("default").Create(ctx, same, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, client, "default", "same", "")
	high := gpuPod("high", 8192, 0)
	high.Spec.PriorityClassName = "gpu-high"
	if _, err := client.CoreV1().Pods("default").Create(ctx, high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, client, "high")
	if p, err := client.CoreV1().Pods("default").Get(ctx, "low", metav1.GetOptions{}); err == nil && p.UID == low.UID && p.DeletionTimestamp == nil {
		t.Errorf("pod high bound and low, whose claim held 12 GiB of the GPU, is still there")
	}
	if p, err := client.CoreV1().Pods("default").Get(ctx, "same", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("pod same on %q (%v); want Pending: high took the freed memory", p.Spec.NodeName, err)
	}
}
