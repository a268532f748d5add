package holder

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/deviceplugin/kubelettest"
	"github.com/gpushare/gpushare/pkg/deviceplugin/runtimetest"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpu/sim"
	"github.com/gpushare/gpushare/pkg/podresources"
)

const testNode = "node-a"

// node is a kubelet with gpushare's device plugins, and the claims they
// resolve, running on a simulated node with two 16 GiB GPUs.
type node struct {
	*kubelettest.Kubelet
	c *Resolver
	// client is the claims' PodResources client.
	client *podresources.Client
	gpus   *sim.Backend
	cdiDir string
	// runtime applies the containers' CDI devices.
	runtime *runtimetest.Runtime
}

func startNode(t testing.TB) *node { return startNodeWith(t, nil) }

// startNodeWith is startNode with edit applied to the claims' Config.
func startNodeWith(t testing.TB, edit func(*Config)) *node {
	t.Helper()
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	// Unix socket paths are short: keep the directory near the root.
	dir, err := os.MkdirTemp("", "cl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	k := kubelettest.Start(t, dir)
	gpus, err := sim.New(&sim.Config{GPUs: []sim.Group{{Model: "Tesla T4", MemoryMiB: 16384, Count: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{Kubelet: k, gpus: gpus, cdiDir: filepath.Join(dir, "cdi")}
	if n.runtime, err = runtimetest.New(n.cdiDir); err != nil {
		t.Fatal(err)
	}
	logger := klog.FromContext(ctx)
	if n.client, err = podresources.Dial(logger, k.PodResourcesSocket(), nil); err != nil {
		t.Fatal(err)
	}
	resources := deviceplugin.ResourcesFrom(nil)
	var m *deviceplugin.Manager
	cfg := Config{Node: testNode, CDIDir: n.cdiDir, Kubelet: n.client, Pods: k.GetPod, NodePods: k.GetActivePods,
		Served: func() []string { return m.Served() }, MPSResources: deviceplugin.MPSResources(resources)}
	if edit != nil {
		edit(&cfg)
	}
	if n.c, err = New(logger, cfg); err != nil {
		t.Fatal(err)
	}
	if m, err = deviceplugin.New(logger, deviceplugin.Config{Dir: dir, Resources: resources, Backend: gpus}, n.c); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchHealth(ctx, t, gpus, m)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("device plugin manager: %v", err)
		}
		<-watched
		n.c.Close()
		_ = n.client.Close()
	})
	select {
	case <-m.Registered():
	case <-time.After(10 * time.Second):
		t.Fatal("the device plugins did not register")
	}
	k.WaitAllocatable(memResource, 2*16384)
	return n
}

// watchHealth passes the GPUs' health changes on to m, as the node
// daemon does, until ctx ends.
func watchHealth(ctx context.Context, t testing.TB, b gpu.Backend, m *deviceplugin.Manager) {
	events := make(chan gpu.Event, 16)
	errc := make(chan error, 1)
	go func() { errc <- b.Watch(ctx, events) }()
	for {
		select {
		case err := <-errc:
			// Nil once ctx ends.
			if err != nil {
				t.Errorf("watching GPU health: %v", err)
			}
			return
		case <-events:
			devs, err := b.Devices()
			if err != nil {
				t.Errorf("reading GPUs: %v", err)
				continue
			}
			m.SetGPUs(devs)
		}
	}
}

// gpuUUID is the simulated GPU's UUID.
func (n *node) gpuUUID(index int) string {
	devs, _ := n.gpus.Devices()
	return devs[index].UUID
}

// gpuUUIDs returns the UUIDs of the node's GPUs, sorted.
func (n *node) gpuUUIDs() []string {
	devs, _ := n.gpus.Devices()
	var uuids []string
	for _, d := range devs {
		uuids = append(uuids, d.UUID)
	}
	slices.Sort(uuids)
	return uuids
}

// pod returns a pod whose container main asks mib of gpushare.io/gpu-mem
// and whose record gives it GPU gpu, as the scheduler writes it.
func (n *node) pod(name string, gpu int, mib int64) *corev1.Pod {
	q := *k8sresource.NewQuantity(mib, k8sresource.DecimalSI)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: testNode, Containers: []corev1.Container{{Name: "main",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{memResource: q}, Requests: corev1.ResourceList{memResource: q}}}}}}
	a := &gpusharev1.Allocation{Node: testNode, Containers: []gpusharev1.ContainerAllocation{{Name: "main", Kind: gpusharev1.ContainerApp,
		GPUs: []gpusharev1.GPUShare{{Index: gpu, UUID: n.gpuUUID(gpu), MemoryMiB: mib}}}}}
	value, err := gpusharev1.Marshal(a)
	if err != nil {
		panic(err) // an Allocation always marshals
	}
	pod.Annotations = map[string]string{gpusharev1.AllocationAnnotation: value}
	return pod
}

// start starts the named container of an admitted pod (the kubelet's
// GetDeviceRunContainerOptions, which calls PreStartContainer, then the
// runtime's CDI injection of the one device it names) and returns its
// environment.
func (n *node) start(pod *corev1.Pod, container string) (map[string]string, error) {
	opts, err := n.StartContainer(pod, container)
	if err != nil {
		return nil, err
	}
	if opts == nil || len(opts.CDIDevices) != 1 {
		return nil, fmt.Errorf("container options %+v: want one CDI device", opts)
	}
	c, err := n.runtime.Create([]string{opts.CDIDevices[0].Name})
	if err != nil {
		return nil, err
	}
	return c.Env, nil
}

// admit is the kubelet's admission of pod.
func (n *node) admit(pod *corev1.Pod) error { return n.Admit(pod) }

type corev1Pod = corev1.Pod

// deviceIDs returns the IDs of resource that the kubelet gave the named
// container of pod.
func (n *node) deviceIDs(pod, container, resource string) []string {
	return slices.Collect(maps.Keys(n.Manager().GetDevices("uid-"+pod, container)[resource]))
}

// specPath is where the claim's CDI spec is written.
func (n *node) specPath(claim string) string { return cdi.SpecPath(n.cdiDir, claim) }
