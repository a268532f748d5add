package holder

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

// A pod edited after binding (its GPU models annotation) gets no GPU for
// a new container, though its record is the scheduler's; unedited, the
// same record is served; a record that books more than the pod asked is
// refused as before.
func TestConformsRefusesEditedPods(t *testing.T) {
	model, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &Resolver{cfg: Config{Node: "n1", Requests: model.PodRequest, RequestAnnotations: model.RequestAnnotations()}}
	pod := func(models string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Annotations: map[string]string{"gpushare.io/gpu-models": models}},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(4096, k8sresource.DecimalSI)}}}}}}
		return p
	}
	rec := func(mib int64) *gpusharev1.Allocation {
		return &gpusharev1.Allocation{Node: "n1", Asked: gpusharev1.AskedOf(map[string]string{"gpushare.io/gpu-models": "Tesla T4"}, model.RequestAnnotations()),
			Containers: []gpusharev1.ContainerAllocation{{Name: "main", Kind: gpusharev1.ContainerApp,
				GPUs: []gpusharev1.GPUShare{{Index: 0, UUID: "GPU-0", MemoryMiB: mib}}}}}
	}
	served := func(p *corev1.Pod, a *gpusharev1.Allocation) error {
		t.Helper()
		v, err := gpusharev1.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		p.Annotations[gpusharev1.AllocationAnnotation] = v
		_, err = c.allocation(p, "main")
		return err
	}
	if err := served(pod("Tesla T4"), rec(4096)); err != nil {
		t.Errorf("the pod as bound: %v", err)
	}
	err = served(pod("NVIDIA A100-SXM4-80GB"), rec(4096))
	if !errors.Is(err, record.ErrRequestEdited) || !strings.Contains(err.Error(), "gpushare.io/gpu-models") {
		t.Errorf("the edited pod: %v, want ErrRequestEdited naming the annotation", err)
	}
	if err := served(pod("Tesla T4"), rec(15360)); err == nil {
		t.Error("a record of 15360 MiB for a pod of 4096 was served")
	}

	// Checked on the node's GPUs as its inventory publishes them: a
	// whole-GPU request recorded as 1 MiB, or on a GPU model the pod
	// does not allow, is refused; the whole GPU, less the node's
	// reservation, is served.
	c.cfg.ReservedMiB = func(string) int64 { return 430 }
	c.SetGPUs([]gpu.Device{{Index: 0, UUID: "GPU-0", Model: "Tesla T4", MemoryMiB: 15360, Healthy: true}})
	whole := func(models string) *corev1.Pod {
		p := pod(models)
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-count": *k8sresource.NewQuantity(1, k8sresource.DecimalSI)}
		return p
	}
	wholeRec := func(mib, compute int64) *gpusharev1.Allocation {
		a := rec(mib)
		a.Containers[0].GPUs[0].Compute = compute
		return a
	}
	if err := served(whole("Tesla T4"), wholeRec(15360-430, 100)); err != nil {
		t.Errorf("the whole GPU, less the reservation: %v", err)
	}
	if err := served(whole("Tesla T4"), wholeRec(1, 1)); !errors.Is(err, alloc.ErrNonconforming) {
		t.Errorf("a whole GPU recorded as 1 MiB: %v, want ErrNonconforming", err)
	}
	other := rec(4096)
	other.Asked = gpusharev1.AskedOf(map[string]string{"gpushare.io/gpu-models": "NVIDIA A100-SXM4-80GB"}, model.RequestAnnotations())
	if err := served(pod("NVIDIA A100-SXM4-80GB"), other); !errors.Is(err, alloc.ErrNonconforming) {
		t.Errorf("a record on a T4 for a pod that allows A100s only: %v, want ErrNonconforming", err)
	}
}
