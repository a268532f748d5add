package deviceplugin

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/deviceplugin/kubelettest"
	"github.com/gpushare/gpushare/pkg/deviceplugin/runtimetest"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpu/sim"
	"github.com/gpushare/gpushare/pkg/holder"
	"github.com/gpushare/gpushare/pkg/podresources"
)

const testNode = "node-a"

// node is a kubelet with gpushare's device plugins running on a simulated
// node with two 16 GiB GPUs.
type node struct {
	*kubelettest.Kubelet
	m      *Manager
	claims *holder.Resolver
	gpus   *sim.Backend
	cdiDir string
	// runtime applies the containers' CDI devices.
	runtime *runtimetest.Runtime
	cancel  context.CancelFunc
	done    chan error
}

func startNode(t testing.TB) *node { return startNodeWith(t, nil) }

// testConfig configures the plugins and the claims they resolve.
type testConfig struct {
	Config
	Claims holder.Config
}

// startNodeWith is startNode with edit applied to the plugins' Config.
func startNodeWith(t testing.TB, edit func(*testConfig)) *node {
	t.Helper()
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	// Unix socket paths are short: keep the directory near the root.
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	k := kubelettest.Start(t, dir)
	gpus, err := sim.New(&sim.Config{GPUs: []sim.Group{{Model: "Tesla T4", MemoryMiB: 16384, Count: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{Kubelet: k, gpus: gpus, cdiDir: filepath.Join(dir, "cdi"), cancel: cancel, done: make(chan error, 1)}
	if n.runtime, err = runtimetest.New(n.cdiDir); err != nil {
		t.Fatal(err)
	}
	logger := klog.FromContext(ctx)
	kubelet, err := podresources.Dial(logger, k.PodResourcesSocket(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var m *Manager
	cfg := testConfig{
		Config: Config{Dir: dir, Resources: ResourcesFrom(nil), Backend: gpus},
		Claims: holder.Config{Node: testNode, CDIDir: n.cdiDir, Kubelet: kubelet, Pods: k.GetPod, NodePods: k.GetActivePods,
			Served: func() []string { return m.Served() }, MPS: &MPS{PipeDir: testPipeDir, ShmDir: testShmDir}},
	}
	if edit != nil {
		edit(&cfg)
		if b, ok := cfg.Backend.(*sim.Backend); ok {
			n.gpus = b
		}
	}
	cfg.Claims.MPSResources = MPSResources(cfg.Resources)
	c, err := holder.New(logger, cfg.Claims)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = New(logger, cfg.Config, c); err != nil {
		t.Fatal(err)
	}
	n.m, n.claims = m, c
	go func() { n.done <- m.Run(ctx) }()
	// The node daemon's health watch, passing changes on.
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		watchHealth(ctx, t, n.gpus, m)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-n.done; err != nil {
			t.Errorf("device plugin manager: %v", err)
		}
		<-watchDone
		c.Close()
		_ = kubelet.Close()
	})
	for _, p := range m.plugins {
		k.WaitAllocatable(string(p.res.Name), p.devices())
	}
	select {
	case <-m.Registered():
	case <-time.After(10 * time.Second):
		t.Fatal("the kubelet has every plugin's devices, but Registered is not closed")
	}
	return n
}

// watchHealth passes the GPUs' health changes on to m, as the node
// daemon does, until ctx ends.
func watchHealth(ctx context.Context, t testing.TB, b gpu.Backend, m *Manager) {
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

type share struct {
	// resource is asked for amount; gpushare.io/gpu-mem for mib if empty.
	resource string
	amount   int64
	// hooks of gpusharev1.HookResource, as the hook policy adds them.
	hooks     int64
	container string
	kind      gpusharev1.ContainerKind
	gpu       int
	mib       int64
	compute   int64
}

// pod returns a pod whose containers ask gpushare.io/gpu-mem and whose
// record gives each share's container its GPU, as the scheduler writes it.
func (n *node) pod(name string, shares ...share) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: testNode}}
	a := &gpusharev1.Allocation{Node: testNode}
	for _, s := range shares {
		name, amount := corev1.ResourceName(s.resource), s.amount
		if name == "" {
			name, amount = "gpushare.io/gpu-mem", s.mib
		}
		c := corev1.Container{Name: s.container, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			name: *k8sresource.NewQuantity(amount, k8sresource.DecimalSI)}}}
		if s.hooks > 0 {
			c.Resources.Limits[gpusharev1.HookResource] = *k8sresource.NewQuantity(s.hooks, k8sresource.DecimalSI)
		}
		// Requests default to limits, as the API server sets them.
		c.Resources.Requests = c.Resources.Limits.DeepCopy()
		if s.kind == gpusharev1.ContainerInit {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
		} else {
			pod.Spec.Containers = append(pod.Spec.Containers, c)
		}
		a.Containers = append(a.Containers, gpusharev1.ContainerAllocation{Name: s.container, Kind: s.kind,
			GPUs: []gpusharev1.GPUShare{{Index: s.gpu, UUID: n.gpuUUID(s.gpu), MemoryMiB: s.mib, Compute: s.compute}}})
	}
	value, err := gpusharev1.Marshal(a)
	if err != nil {
		panic(err) // an Allocation always marshals
	}
	pod.Annotations = map[string]string{gpusharev1.AllocationAnnotation: value}
	return pod
}

// The MPS directories of the test nodes.
const (
	testPipeDir = "/tmp/nvidia-mps"
	testShmDir  = "/run/gpushare/mps-shm"
)

// start starts the named container of an admitted pod and returns its
// environment.
func (n *node) start(pod *corev1.Pod, container string) (env map[string]string, err error) {
	c, err := n.create(pod, container)
	if err != nil {
		return nil, err
	}
	return c.Env, nil
}

// create starts the named container of an admitted pod: the kubelet's
// GetDeviceRunContainerOptions, which calls PreStartContainer, and then
// the runtime's CDI injection of the one device it names.
func (n *node) create(pod *corev1.Pod, container string) (*runtimetest.Container, error) {
	opts, err := n.StartContainer(pod, container)
	if err != nil {
		return nil, err
	}
	return n.apply(opts)
}

// apply is the runtime's CDI injection of the one device opts name.
func (n *node) apply(opts *devicemanager.DeviceRunContainerOptions) (*runtimetest.Container, error) {
	if opts == nil || len(opts.CDIDevices) != 1 {
		return nil, fmt.Errorf("container options %+v: want one CDI device", opts)
	}
	return n.runtime.Create([]string{opts.CDIDevices[0].Name})
}

// admit is the kubelet's admission of pod.
func (n *node) admit(pod *corev1.Pod) error { return n.Admit(pod) }

type corev1Pod = corev1.Pod

func corev1UID(s string) types.UID { return types.UID("uid-" + strings.ReplaceAll(s, " ", "-")) }

// setRecord edits the pod's allocation record.
func setRecord(t testing.TB, p *corev1.Pod, edit func(*gpusharev1.Allocation)) {
	t.Helper()
	a, err := gpusharev1.ParseAllocation(p.Annotations[gpusharev1.AllocationAnnotation])
	if err != nil {
		t.Fatal(err)
	}
	edit(a)
	value, err := gpusharev1.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[gpusharev1.AllocationAnnotation] = value
}

// deviceIDs returns the IDs of resource that the kubelet gave the named
// container of pod, sorted.
func (n *node) deviceIDs(pod *corev1.Pod, container, resource string) []string {
	return slices.Sorted(maps.Keys(n.Manager().GetDevices(string(pod.UID), container)[resource]))
}
