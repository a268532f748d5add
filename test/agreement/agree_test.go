// Package agreement checks that every component that reads pods' allocation
// records books the same GPUs from them.
package agreement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/dra"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/inventory"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

const (
	node       = "n1"
	modelsKey  = "gpushare.io/gpu-models"
	gpushareMi = corev1.ResourceName("gpushare.io/gpu-mem")
)

// TestReadersAgree builds random clusters of pods on one node (gpushare's
// records, Aliyun's, init containers, ended and unbound pods, records for
// another node, records edited after binding or written by hand) and
// checks that every reader books the same memory and compute on every
// GPU: the scheduler's cache, the DRA driver's slice and Prepare
// (dra.PodBookings), and the reader itself; and that the pods the cache
// reports as booked but not what they ask are those whose containers the
// node daemon refuses (Booking.Problem).
func TestReadersAgree(t *testing.T) {
	model, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := model.RequestAnnotations()
	reader := record.Reader{Requests: model.PodRequest, RequestAnnotations: func(*corev1.Pod) []string { return keys }}
	devs := []gpu.Device{
		{Index: 0, UUID: "GPU-a", Model: "Tesla T4", MemoryMiB: 15360, NUMANode: -1, Healthy: true},
		{Index: 1, UUID: "GPU-b", Model: "Tesla T4", MemoryMiB: 15360, NUMANode: -1, Healthy: true},
		{Index: 2, UUID: "GPU-c", Model: "Tesla T4", MemoryMiB: 15360, NUMANode: -1, Healthy: true},
	}
	inv, err := gpusharev1.Marshal(inventory.From(devs, gpusharev1.ModeShared, false))
	if err != nil {
		t.Fatal(err)
	}
	kube := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{gpusharev1.NodeLabel: "true"},
		Annotations: map[string]string{gpusharev1.InventoryAnnotation: inv}}}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 52))
		pods := randomPods(t, rng, devs, keys)
		reported := map[types.UID]error{}
		c := cache.New(logr.Discard(), cache.Options{Requests: reader.Requests, RequestAnnotations: reader.RequestAnnotations,
			Refused: func(p *corev1.Pod, err error) {
				if errors.Is(err, record.ErrUnconforming) || errors.Is(err, record.ErrRequestEdited) {
					reported[p.UID] = err
				}
			}})
		c.SetNode(kube)
		for _, p := range pods {
			c.SetPod(p)
		}
		var booked []alloc.Usage
		if err := c.Read(node, func(s *alloc.NodeState) { booked = append([]alloc.Usage(nil), s.GPUs...) }); err != nil {
			t.Fatal(err)
		}
		node := dra.NodeOf(node, devs, dra.Options{})
		slice := dra.PodBookings(pods, reader, node)
		summed := make([]alloc.Usage, len(devs))
		problems := map[types.UID]bool{}
		for _, p := range pods {
			b, err := reader.Book(p, node)
			if err != nil {
				continue
			}
			for _, u := range b.Placement.Booked {
				summed[u.GPU].MemoryMiB += u.MemoryMiB
				summed[u.GPU].Compute += u.Compute
			}
			if b.Problem() != nil {
				problems[p.UID] = true
			}
		}
		for i, d := range devs {
			s := slice[d.UUID]
			if booked[i] != summed[i] || s.MemoryMiB != booked[i].MemoryMiB || s.ComputePercent != booked[i].Compute {
				t.Fatalf("seed %d, GPU %d: the cache books %+v, the DRA driver %+v, the reader %+v\n%s",
					seed, i, booked[i], s, summed[i], describe(pods))
			}
		}
		for uid := range problems {
			if reported[uid] == nil {
				t.Errorf("seed %d: pod %s is refused by the node daemon but not reported by the scheduler", seed, uid)
			}
		}
		for uid, err := range reported {
			if !problems[uid] {
				t.Errorf("seed %d: pod %s is reported (%v) but served by the node daemon", seed, uid, err)
			}
		}
	}
}

// randomPods returns up to 12 pods on node, each of a random kind; no
// GPU is over-committed (1024 MiB a pod at most, 12 pods, 15360 MiB a
// GPU).
func randomPods(t *testing.T, rng *rand.Rand, devs []gpu.Device, keys []string) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	for i := range rng.IntN(13) {
		g := devs[rng.IntN(len(devs))]
		mib := int64(1 + rng.IntN(1024))
		name := fmt.Sprintf("p%d", i)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Annotations: map[string]string{}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		asks := func(c string, n int64) corev1.Container {
			return corev1.Container{Name: c, Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{gpushareMi: *k8sresource.NewQuantity(n, k8sresource.DecimalSI)}}}
		}
		a := &gpusharev1.Allocation{Node: node, Asked: gpusharev1.AskedOf(nil, keys),
			Containers: []gpusharev1.ContainerAllocation{{Name: "main", Kind: gpusharev1.ContainerApp,
				GPUs: []gpusharev1.GPUShare{{Index: g.Index, UUID: g.UUID, MemoryMiB: mib}}}}}
		p.Spec.Containers = []corev1.Container{asks("main", mib)}
		switch kind := rng.IntN(9); kind {
		case 0: // gpushare's record, as the scheduler writes it
		case 1: // written by hand: more than the pod asks
			a.Containers[0].GPUs[0].MemoryMiB = mib + 100
		case 2: // Aliyun's record, 1 GiB
			p.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{record.AliyunMemory: *k8sresource.NewQuantity(1, k8sresource.DecimalSI)}}}}
			p.Annotations[record.AliyunIndex] = fmt.Sprint(g.Index)
			a = nil
		case 3: // ended
			p.Status.Phase = corev1.PodSucceeded
		case 4: // an init container before the app container
			init := int64(1 + rng.IntN(1024))
			p.Spec.InitContainers = []corev1.Container{asks("setup", init)}
			a.Containers = append([]gpusharev1.ContainerAllocation{{Name: "setup", Kind: gpusharev1.ContainerInit,
				GPUs: []gpusharev1.GPUShare{{Index: g.Index, UUID: g.UUID, MemoryMiB: init}}}}, a.Containers...)
		case 5: // edited after binding: a GPU model it did not ask
			p.Annotations[modelsKey] = "NVIDIA A100-SXM4-80GB"
		case 6: // not bound
			p.Spec.NodeName = ""
		case 7: // a record for another node
			a.Node = "n2"
		case 8: // a request the model no longer reads
			p.Spec.Containers[0].Resources.Limits[gpushareMi] = *k8sresource.NewQuantity(-1, k8sresource.DecimalSI)
		}
		if a != nil {
			v, err := gpusharev1.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			p.Annotations[gpusharev1.AllocationAnnotation] = v
		}
		pods = append(pods, p)
	}
	return pods
}

func describe(pods []*corev1.Pod) string {
	var s string
	for _, p := range pods {
		s += fmt.Sprintf("%s node=%q phase=%s annotations=%v\n", p.Name, p.Spec.NodeName, p.Status.Phase, p.Annotations)
	}
	return s
}
