package cache_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/resource"
)

// draClaim is claim uid allocated devices of node's pool, each
// consuming mib (0: taken whole), reserved for pods.
func draClaim(uid, node string, mib int64, devices []string, pods ...string) *resourceapi.ResourceClaim {
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)}}
	a := &resourceapi.AllocationResult{}
	for _, d := range devices {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: claim.Driver, Pool: node, Device: d}
		if mib > 0 {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]k8sresource.Quantity{claim.Memory: *k8sresource.NewQuantity(mib<<20, k8sresource.BinarySI)}
		}
		a.Devices.Results = append(a.Devices.Results, r)
	}
	rc.Status.Allocation = a
	for _, p := range pods {
		rc.Status.ReservedFor = append(rc.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID(p)})
	}
	return rc
}

// TestClaimsBookTheirGPUs: an allocated claim of gpushare's devices books
// the GPUs of those indices beside the pods' records (a device taken
// whole books all of it), the pod it is reserved for drops what the
// scheduler assumed for it, and a deallocated or deleted claim frees its
// share. A claim naming a GPU the node does not list books nothing.
func TestClaimsBookTheirGPUs(t *testing.T) {
	c, logs := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	c.SetPod(recordedPod(t, "rec", appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4000, 0)})))

	// The scheduler assumed 3000 MiB on GPU 1 for pod p; DRA allocated
	// its claim 3072 MiB of gpu-0.
	if err := c.Assume("p", "default/p", placement("n1", 1, 3000, 0)); err != nil {
		t.Fatal(err)
	}
	c.SetClaim(draClaim("c1", "n1", 3072, []string{"gpu-0"}, "p"))
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 4000 + 3072}, {}}; !cmp.Equal(got, want) {
		t.Errorf("after the claim's allocation: %v; want the record and the claim on GPU 0, nothing assumed on GPU 1: %v", got, want)
	}
	// Seen again, unchanged: nothing moves.
	c.SetClaim(draClaim("c1", "n1", 3072, []string{"gpu-0"}, "p"))
	c.SetClaim(draClaim("whole", "n1", 0, []string{"gpu-1"}))
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 7072}, {MemoryMiB: 16384, Compute: alloc.FullCompute}}; !cmp.Equal(got, want) {
		t.Errorf("with a whole device: %v; want %v", got, want)
	}
	// The metrics tell the claims' part of each GPU's booking.
	want := `# HELP gpushare_gpu_memory_claimed_bytes GPU memory booked by ResourceClaims of gpushare's DRA devices, part of gpushare_gpu_memory_booked_bytes.
# TYPE gpushare_gpu_memory_claimed_bytes gauge
gpushare_gpu_memory_claimed_bytes{gpu="0",node="n1"} 3.221225472e+09
gpushare_gpu_memory_claimed_bytes{gpu="1",node="n1"} 1.7179869184e+10
`
	if err := testutil.CollectAndCompare(cache.NewCollector(c), strings.NewReader(want), "gpushare_gpu_memory_claimed_bytes"); err != nil {
		t.Errorf("claimed metrics:\n%v", err)
	}

	// Deallocated (status cleared), then deleted.
	dealloc := draClaim("whole", "n1", 0, nil)
	dealloc.Status.Allocation = nil
	c.SetClaim(dealloc)
	c.RemoveClaim("c1")
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 4000}, {}}; !cmp.Equal(got, want) {
		t.Errorf("after the claims are gone: %v; want the record alone: %v", got, want)
	}

	c.SetClaim(draClaim("far", "n1", 1024, []string{"gpu-5"}))
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 4000}, {}}; !cmp.Equal(got, want) {
		t.Errorf("a claim of a GPU the node lacks booked %v; want %v", got, want)
	}
	if m := logs.matching("Ignoring the claim's allocation", "GPU 5"); len(m) == 0 {
		t.Errorf("no log says why the claim of gpu-5 books nothing; logs:\n%s", logs)
	}

	// A claim of a node the cache learns later books once it arrives.
	c.SetClaim(draClaim("early", "n2", 2048, []string{"gpu-0"}))
	c.SetNode(gpuNode(t, "n2", 8192))
	if got, want := usage(t, c, "n2"), []alloc.Usage{{MemoryMiB: 2048}}; !cmp.Equal(got, want) {
		t.Errorf("n2 after it arrived: %v; want the claim's %v", got, want)
	}
}

// TestHoldingOfCountsClaims: what evicting a pod frees is its own booking
// and the claims reserved for it alone; a claim two pods share is not
// freed by evicting one of them, and a released claim no longer counts.
func TestHoldingOfCountsClaims(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384))
	c.SetPod(recordedPod(t, "rec", appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4000, 10)})))
	c.SetClaim(draClaim("own", "n1", 2048, []string{"gpu-0", "gpu-1"}, "rec"))
	c.SetClaim(draClaim("shared", "n1", 1024, []string{"gpu-1"}, "rec", "other"))
	c.SetClaim(draClaim("alone", "n1", 3072, []string{"gpu-1"}, "p"))

	want := []alloc.Assignment{{GPU: 0, UUID: uuidOf("n1", 0), Usage: alloc.Usage{MemoryMiB: 6048, Compute: 10}},
		{GPU: 1, UUID: uuidOf("n1", 1), Usage: alloc.Usage{MemoryMiB: 2048}}}
	if h := c.HoldingOf("rec"); h == nil || h.Node != "n1" || !cmp.Equal(h.Booked, want) {
		t.Errorf("HoldingOf(rec) = %+v; want its record and its own claim: %+v", h, want)
	}
	if h := c.HoldingOf("p"); h == nil || !cmp.Equal(h.Booked, []alloc.Assignment{{GPU: 1, UUID: uuidOf("n1", 1), Usage: alloc.Usage{MemoryMiB: 3072}}}) {
		t.Errorf("HoldingOf(p) = %+v; want claim alone's 3072 MiB of GPU 1", h)
	}
	if h := c.HoldingOf("other"); h != nil {
		t.Errorf("HoldingOf(other) = %+v; want nothing: the claim it shares stays", h)
	}
	c.RemoveClaim("alone")
	if h := c.HoldingOf("p"); h != nil {
		t.Errorf("HoldingOf(p) = %+v after its claim went; want nothing", h)
	}
}

// TestClaimsFreedWithTheirPod: a pod's deletion frees the claims reserved
// for it alone at once, and the claim's updates on its way to being
// deallocated do not book it again; one reserved for another pod again
// books.
func TestClaimsFreedWithTheirPod(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384))
	c.SetClaim(draClaim("own", "n1", 4096, []string{"gpu-0"}, "p"))
	c.SetClaim(draClaim("shared", "n1", 1024, []string{"gpu-0"}, "p", "q"))
	c.RemovePod("p")
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 1024}}; !cmp.Equal(got, want) {
		t.Errorf("after pod p went: %v; want the shared claim alone %v", got, want)
	}
	c.SetClaim(draClaim("own", "n1", 4096, []string{"gpu-0"}, "p"))
	c.SetClaim(draClaim("own", "n1", 4096, []string{"gpu-0"}))
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 1024}}; !cmp.Equal(got, want) {
		t.Errorf("claim own, still allocated, seen again: %v; want it freed %v", got, want)
	}
	c.SetClaim(draClaim("own", "n1", 4096, []string{"gpu-0"}, "r"))
	if got, want := usage(t, c, "n1"), []alloc.Usage{{MemoryMiB: 5120}}; !cmp.Equal(got, want) {
		t.Errorf("claim own reserved for pod r: %v; want it booked again %v", got, want)
	}
}

// TestOverCommitted: a claim allocated past what its GPU has left beside
// a record is listed with its one pod and the GPU, and so is the record
// with its pod, whichever of the two the cache booked first; a claim of
// several pods on that GPU is listed with no pod; one on a GPU that fits
// is not; and once the record goes, the claims fit and are no longer
// listed.
func TestOverCommitted(t *testing.T) {
	for _, claimFirst := range []bool{false, true} {
		c, _ := newCache(t)
		c.SetNode(gpuNode(t, "n1", 16384, 16384))
		// Its second container, on GPU 1, fits: the node may run it.
		rec := recordedPod(t, "rec", appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 12000, 0)}, []gpusharev1.GPUShare{share("n1", 1, 1000, 0)}))
		if !claimFirst {
			c.SetPod(rec)
		}
		c.SetClaim(draClaim("over", "n1", 8192, []string{"gpu-0"}, "p"))
		c.SetClaim(draClaim("fits", "n1", 8192, []string{"gpu-1"}, "q"))
		c.SetClaim(draClaim("shared", "n1", 1024, []string{"gpu-0"}, "r", "s"))
		if claimFirst {
			c.SetPod(rec)
		}
		want := []cache.Overbooked{{Node: "n1", Namespace: rec.Namespace, Pod: rec.Name, PodUID: rec.UID, GPUs: []int{0}, Containers: []string{"c0"}},
			{Claim: "default/over", Node: "n1", Namespace: "default", Pod: "p", PodUID: "p", GPUs: []int{0}},
			{Claim: "default/shared", Node: "n1", Namespace: "default", GPUs: []int{0}}}
		got := c.OverCommitted()
		slices.SortFunc(got, func(a, b cache.Overbooked) int { return strings.Compare(a.Claim, b.Claim) })
		if !cmp.Equal(got, want) {
			t.Errorf("claim booked first %v: %+v; want %+v", claimFirst, got, want)
		}
		c.RemovePod(rec.UID)
		if got := c.OverCommitted(); len(got) != 0 {
			t.Errorf("claim booked first %v, the record gone: %+v; want none", claimFirst, got)
		}
	}
}

// TestCPUHogOverCommitsNoGPU: a pod bound directly with a CPU request past
// the node's allocatable (the kubelet refuses it a moment later) does not
// make a claim booked meanwhile conflict: only GPUs conflict, and no GPU
// is held full or listed as over-committed, during or after.
func TestCPUHogOverCommitsNoGPU(t *testing.T) {
	r := &logRecorder{}
	c := cache.New(r.logger(), cache.Options{Resources: resource.PodCPUMemory})
	n := gpuNode(t, "n1", 16384, 16384)
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse("2"), corev1.ResourceMemory: k8sresource.MustParse("16Gi")}
	c.SetNode(n)
	c.SetClaim(draClaim("victim", "n1", 1024, []string{"gpu-0"}, "vpod"))
	hog := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "hog", UID: "hog"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse("50")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	c.SetPod(hog)
	c.SetClaim(draClaim("mine", "n1", 256, []string{"gpu-0"}, "xpod"))
	check := func(when string) {
		t.Helper()
		if got := c.OverCommitted(); len(got) != 0 {
			t.Errorf("%s: claims listed over-committed on a GPU holding 1280 of 16384 MiB: %+v", when, got)
		}
		if s := c.Snapshot()[0]; !s.Node.GPUs[0].Healthy {
			t.Errorf("%s: GPU 0 held full", when)
		}
	}
	check("with the hog bound")
	hog = hog.DeepCopy()
	hog.Status.Phase = corev1.PodFailed
	c.SetPod(hog)
	check("after the kubelet refused the hog")
}
