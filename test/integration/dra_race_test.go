package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/dra"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/refused"
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
	t.Parallel()
	ctx := context.Background()
	_, client, _ := startPlugin(t, schedulerConfigWith(t, "binpack"))
	spec, gpus, x, slice := staleSlice(t, client)

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

// staleSlice makes node "two" of two T4 GPUs, binds an extended-resource
// pod of 12000 MiB to one of them, x, and publishes a ResourceSlice that
// does not count it yet and offers GPU x alone, as gpushare-dra's can lag
// a pod bound a moment ago. It returns the node, its GPUs, x and the
// slice.
func staleSlice(t *testing.T, client kubernetes.Interface) (controlplane.NodeSpec, []gpu.Device, int, *resourceapi.ResourceSlice) {
	t.Helper()
	ctx := context.Background()
	spec := controlplane.NodeSpec{Name: "two", Model: "Tesla T4", MemoryMiB: 15360, Count: 2}
	createNodes(t, client, spec)
	applyDeviceClasses(t, client)
	var gpus []gpu.Device
	for _, g := range spec.Inventory().GPUs {
		gpus = append(gpus, gpu.Device{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
			UsableMemoryMiB: g.MemoryMiB, NUMANode: g.NUMANode, Healthy: true})
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("ext", 12000, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	x := record(t, boundPod(t, client, "default", "ext")).Containers[0].GPUs[0].Index
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: spec.Name + "-gpu.gpushare.io"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: dra.Driver, Pool: resourceapi.ResourcePool{Name: spec.Name, ResourceSliceCount: 1}, NodeName: ptr.To(spec.Name),
		Devices: dra.Devices([]gpu.Device{gpus[x]}, dra.Options{}),
	}}
	slice, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return spec, gpus, x, slice
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

// TestExtenderReleasesRefusedClaim: in extender mode, stock
// kube-scheduler's DRA allocator picks a GPU from the node's
// ResourceSlice, which may not yet count a pod the extender bound a
// moment ago. Here the slice offers only the GPU an extended-resource pod
// just took 12000 MiB of, and a ReplicaSet's 8192 MiB claim is allocated
// there: the node refuses to prepare it (kwok leaves the pod unstarted,
// and the test posts the kubelet's FailedPrepareDynamicResources event,
// as the node would). The extender books the claim beside the record,
// finds the GPU over-committed, and once the pod has waited its grace
// and its node has refused the claim, deletes it with an event: the claim goes with it, and the pod the
// ReplicaSet creates again is allocated the other GPU, once the slice
// counts the first pod. Before, the pod stayed bound and the GPU booked
// past its memory until someone deleted it. The extender also books
// claims against extended-resource pods (a pod that would fit beside the
// claim's GPU by records alone waits), and refuses a pod that asks both
// ways with the reason. Last, the race the other way: a pod whose record
// lands beside the claim's, whose container the node refuses, is
// deleted the same way.
func TestExtenderReleasesRefusedClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	e := startSecureExtender(t, c, "--claim-release-grace=3s")
	e.startScheduler(t, c)
	spec, gpus, x, slice := staleSlice(t, client)

	// The ReplicaSet's pods ask 8192 MiB through a claim template.
	template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "share", Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: draShareClass,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{
					dra.Memory: *k8sresource.NewQuantity(8192<<20, k8sresource.BinarySI)}}}}}}}}}
	if _, err := client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "claimer", controlplane.NotStartedLabel: "true"}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "claimer", Namespace: "default"}, Spec: appsv1.ReplicaSetSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "claimer"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("share")}},
			Containers: []corev1.Container{{Name: "main", Image: "example.com/cuda", Resources: corev1.ResourceRequirements{
				Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		}},
	}}
	if _, err := client.AppsV1().ReplicaSets("default").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := boundPods(t, client, "default", "app=claimer", 1)[0]
	if got := claimDevice(t, client, &first); got != dra.DeviceName(x) {
		t.Fatalf("the claim was allocated %s; the test needs the stale slice's %s", got, dra.DeviceName(x))
	}

	// gpushare-dra would now publish the slice that counts the pod.
	slice.Spec.Devices = dra.DevicesBeside(gpus, dra.Options{}, map[string]dra.Share{gpus[x].UUID: {MemoryMiB: 12000}})
	if _, err := client.ResourceV1().ResourceSlices().Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Past the grace, the pod waits on: its node has not refused the
	// claim. Then the kubelet says it has, as a real node would.
	time.Sleep(5 * time.Second)
	if p, err := client.CoreV1().Pods("default").Get(ctx, first.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod was deleted before its node refused its claim (%v)", err)
	}
	cur, err := client.CoreV1().Pods("default").Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil || len(cur.Status.ResourceClaimStatuses) != 1 || cur.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("the pod's claim: %v, %+v", err, cur.Status.ResourceClaimStatuses)
	}
	claimName := "default/" + *cur.Status.ResourceClaimStatuses[0].ResourceClaimName
	now := metav1.Now()
	refusal := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: first.Name + ".", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: first.Name, UID: first.UID},
		Reason:         refused.KubeletRefusal, Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: "kubelet", Host: spec.Name},
		FirstTimestamp: now, LastTimestamp: now,
		Message: "Failed to prepare dynamic resources: NodePrepareResources failed for claim " + claimName + ": claim " + claimName +
			": GPU " + dra.DeviceName(x) + " would hold 20192 of 15360 MiB and 0% compute: refused"}
	if _, err := client.CoreV1().Events("default").Create(ctx, refusal, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventNote(t, client, "default", first.Name, refused.Reason, "the node refuses to prepare the claim")
	var again *corev1.Pod
	err = waitFor(60*time.Second, func() (bool, error) {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=claimer"})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.UID != first.UID && p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				again = p
				return claimDevice(t, client, p) != "", nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the ReplicaSet's pod was not created again with its claim allocated: %v", err)
	}
	if got := claimDevice(t, client, again); got == dra.DeviceName(x) {
		t.Errorf("the pod created again was allocated %s again; want the other GPU", got)
	}
	assertClaimsFit(t, client, spec.Name, 15360)

	// 8000 MiB fits neither GPU: 3360 left beside ext, 7168 beside the
	// claim. By records alone it would go beside the claim.
	if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("beside", 8000, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, client, "default", "beside", "")
	small := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: "default"}, Spec: resourceapi.ResourceClaimSpec{
		Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: draShareClass,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{
				dra.Memory: *k8sresource.NewQuantity(1024<<20, k8sresource.BinarySI)}}}}}}}}
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, small, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mixed := gpuPod("mixed", 1000, 0)
	mixed.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("small")}}
	if _, err := client.CoreV1().Pods("default").Create(ctx, mixed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, client, "default", "mixed", "both through extended resources and through ResourceClaims")

	// The pod created again is not deleted: its claim fits.
	time.Sleep(5 * time.Second)
	if p, err := client.CoreV1().Pods("default").Get(ctx, again.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the pod whose claim fits was deleted (%v)", err)
	}
	if p, err := client.CoreV1().Pods("default").Get(ctx, "beside", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("beside: %v, bound to %q; want it waiting", err, p.Spec.NodeName)
	}
	assertClaimsFit(t, client, spec.Name, 15360)

	// The race the other way: a record that reached the node after the
	// claim on its GPU was prepared. Bound here by hand with 8000 MiB
	// beside the claim's 8192; the node refuses its container (the
	// kubelet's Failed event, posted as a real node would), and the
	// extender deletes the pod, the claim's pod untouched.
	y := 1 - x
	late := gpuPod("late", 8000, 0)
	late.Labels = map[string]string{controlplane.NotStartedLabel: "true"}
	late.Spec.SchedulerName = "no-scheduler"
	late, err = client.CoreV1().Pods("default").Create(ctx, late, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	value, err := gpusharev1.Marshal(&gpusharev1.Allocation{Node: spec.Name, Containers: []gpusharev1.ContainerAllocation{{
		Name: "main", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{{Index: y, UUID: gpus[y].UUID, MemoryMiB: 8000}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "default", UID: late.UID, Annotations: map[string]string{gpusharev1.AllocationAnnotation: value}},
		Target:     corev1.ObjectReference{Kind: "Node", Name: spec.Name},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	now = metav1.Now()
	failed := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "late.", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "late", UID: late.UID},
		Reason:         refused.KubeletFailed, Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: "kubelet", Host: spec.Name},
		FirstTimestamp: now, LastTimestamp: now,
		Message: "Error: device plugin PreStartContainer rpc failed with err: rpc error: code = Unknown desc = pod default/late container main: GPU " +
			strconv.Itoa(y) + " (" + gpus[y].UUID + ") would hold 16192 of 15360 MiB and 0% compute with the pods that book it (8000 MiB, 0%) and the " +
			refused.BesideWords + " (8192 MiB, 0%): refused"}
	if _, err := client.CoreV1().Events("default").Create(ctx, failed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventNote(t, client, "default", "late", refused.Reason, "allocation record books GPU "+strconv.Itoa(y))
	err = waitFor(30*time.Second, func() (bool, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, "late", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the pod refused beside the claim was not deleted: %v", err)
	}
	if p, err := client.CoreV1().Pods("default").Get(ctx, again.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the claim's pod was deleted (%v)", err)
	}
}

// claimDevice returns the device pod's one claim was allocated, "" while
// it has none.
func claimDevice(t *testing.T, client kubernetes.Interface, pod *corev1.Pod) string {
	t.Helper()
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		rc, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(context.Background(), *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil || rc.Status.Allocation == nil {
			return ""
		}
		for _, r := range rc.Status.Allocation.Devices.Results {
			return r.Device
		}
	}
	return ""
}
