package deviceplugin

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/deviceplugin/runtimetest"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

// A pod HAMi placed (its record only) gets the GPUs HAMi named by UUID
// when its container starts, held by HAMi-core to the share it asks, as
// a percent of its GPU; a record giving it more than it asks starts
// nothing.
func TestHAMiPlacedPodKeepsItsGPU(t *testing.T) {
	cfg := &v1alpha1.ResourceModel{Resources: append(v1alpha1.DefaultResources(), v1alpha1.HAMiResources()...)}
	model, err := resource.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := hamiCoreFiles(t, "")
	n := startNodeWith(t, func(c *testConfig) {
		c.Resources, c.Claims.Requests = ResourcesFrom(cfg), model.PodRequest
		c.Claims.Enforcement, c.Claims.HAMiCore = gpusharev1.EnforcementHAMiCore, h
	})
	hamiPlaced := func(name, allocated string) *corev1.Pod {
		p := n.pod(name, share{resource: "nvidia.com/gpu", amount: 1, container: "main", kind: gpusharev1.ContainerApp})
		l := p.Spec.Containers[0].Resources.Limits
		l["nvidia.com/gpumem-percentage"] = *k8sresource.NewQuantity(25, k8sresource.DecimalSI)
		l["nvidia.com/gpucores"] = *k8sresource.NewQuantity(20, k8sresource.DecimalSI)
		p.Spec.Containers[0].Resources.Requests = l.DeepCopy()
		p.Annotations = map[string]string{record.HAMiNode: testNode, record.HAMiAllocated: allocated}
		return p
	}
	// 25% of a 16384 MiB GPU is 4096 MiB.
	old := hamiPlaced("old", n.gpuUUID(1)+",NVIDIA,4096,20:;")
	if err := n.admit(old); err != nil {
		t.Fatal(err)
	}
	c, err := n.createAll(old, "main")
	if err != nil {
		t.Fatal(err)
	}
	if c.Env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(1) || c.Env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "4096m" ||
		c.Env["CUDA_DEVICE_SM_LIMIT"] != "20" || c.Mounts[cdi.HAMiCorePreloadPath] != h.Preload {
		t.Errorf("sees %q, env %v, mounts %v; want GPU 1 held to 4096 MiB and 20%%", c.Env["NVIDIA_VISIBLE_DEVICES"], c.Env, c.Mounts)
	}
	greedy := hamiPlaced("greedy", n.gpuUUID(0)+",NVIDIA,4096,60:;")
	if err := n.admit(greedy); err != nil {
		t.Fatal(err)
	}
	if _, err := n.createAll(greedy, "main"); err == nil || !strings.Contains(err.Error(), "gets 60% compute, the container asks 20%") {
		t.Fatalf("a record giving 60%% of a GPU to a container asking 20%%: %v", err)
	}
}

// createAll starts the named container of an admitted pod, as create
// does, with the CDI devices of every resource it asks: one per resource
// (here nvidia.com/gpu, gpumem-percentage and gpucores), each with the
// container's whole edits, which the runtime applies over one another.
func (n *node) createAll(pod *corev1.Pod, container string) (*runtimetest.Container, error) {
	opts, err := n.StartContainer(pod, container)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range opts.CDIDevices {
		names = append(names, d.Name)
	}
	return n.runtime.Create(names)
}
