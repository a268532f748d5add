package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	_ "unsafe" // go:linkname to the device manager's constructor

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/gpu/sim"
)

// The kubelet's device manager, in process. Its exported constructor
// hard-wires /var/lib/kubelet/device-plugins; the unexported one, which
// its own tests use, takes the socket path.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

const testNode = "node-a"

// kubelet is the kubelet's device manager and PodResources server over a
// temporary plugin directory, with the pods the test adds as active pods.
type kubelet struct {
	t      testing.TB
	dir    string
	dm     *devicemanager.ManagerImpl
	mu     sync.Mutex
	pods   map[types.UID]*corev1.Pod
	server *grpc.Server
}

func startKubelet(t testing.TB, dir string) *kubelet {
	t.Helper()
	k := &kubelet{t: t, dir: dir, pods: map[types.UID]*corev1.Pod{}}
	k.startDeviceManager()
	// The PodResources server, as the kubelet serves it.
	// In its own directory, as on a node: the device manager removes
	// every socket in the plugin directory when it starts.
	sock := filepath.Join(dir, "pod-resources", "kubelet.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	k.server = grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(k.server, podresources.NewV1PodResourcesServer(context.Background(),
		podresources.PodResourcesProviders{Pods: k, Devices: devicesProvider{k}, Cpus: noCPUs{}, Memory: noMemory{}, DynamicResources: noDRA{}}))
	go func() { _ = k.server.Serve(l) }()
	t.Cleanup(func() {
		k.server.Stop()
		_ = k.manager().Stop(klog.Background())
	})
	return k
}

func (k *kubelet) startDeviceManager() {
	k.t.Helper()
	logger := klog.Background()
	dm, err := newManagerImpl(logger, filepath.Join(k.dir, "kubelet.sock"), nil, topologymanager.NewFakeManager())
	if err != nil {
		k.t.Fatal(err)
	}
	ready := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	if err := dm.Start(logger, k.GetActivePods, ready, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		k.t.Fatal(err)
	}
	k.mu.Lock()
	k.dm = dm
	k.mu.Unlock()
}

func (k *kubelet) manager() *devicemanager.ManagerImpl {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dm
}

// restart stops the device manager and starts a new one on the same
// directory, as a kubelet restart does.
func (k *kubelet) restart() {
	if err := k.manager().Stop(klog.Background()); err != nil {
		k.t.Fatal(err)
	}
	k.startDeviceManager()
}

func (k *kubelet) add(pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods[pod.UID] = pod
}

// GetActivePods implements podresources.PodsProvider and the device
// manager's ActivePodsFunc.
func (k *kubelet) GetActivePods() []*corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(k.pods))
	for _, p := range k.pods {
		out = append(out, p)
	}
	return out
}

// GetPods implements podresources.PodsProvider.
func (k *kubelet) GetPods() []*corev1.Pod { return k.GetActivePods() }

// GetPodByName implements podresources.PodsProvider.
func (k *kubelet) GetPodByName(namespace, name string) (*corev1.Pod, bool) {
	for _, p := range k.GetActivePods() {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// getPod is the plugin's PodGetter.
func (k *kubelet) getPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	if p, ok := k.GetPodByName(namespace, name); ok {
		return p, nil
	}
	return nil, fmt.Errorf("pod %s/%s not found", namespace, name)
}

// capacity returns the device manager's allocatable count of resource.
func (k *kubelet) allocatable(resource string) int64 {
	_, alloc, _ := k.manager().GetCapacity()
	q := alloc[corev1.ResourceName(resource)]
	return q.Value()
}

func (k *kubelet) waitAllocatable(resource string, want int64) {
	k.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for k.allocatable(resource) != want {
		if time.Now().After(deadline) {
			k.t.Fatalf("%s allocatable is %d, want %d", resource, k.allocatable(resource), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// devicesProvider adapts the device manager to the PodResources server,
// as the kubelet's container manager does: one entry per device.
type devicesProvider struct{ k *kubelet }

func (d devicesProvider) UpdateAllocatedDevices() { d.k.manager().UpdateAllocatedDevices() }

func (d devicesProvider) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	return containerDevices(d.k.manager().GetDevices(podUID, containerName))
}

func (d devicesProvider) GetAllocatableDevices() []*podresourcesapi.ContainerDevices {
	return containerDevices(d.k.manager().GetAllocatableDevices())
}

func containerDevices(in devicemanager.ResourceDeviceInstances) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for resource, devs := range in {
		for id := range devs {
			out = append(out, &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{id}})
		}
	}
	return out
}

type noCPUs struct{}

func (noCPUs) GetCPUs(string, string) []int64 { return nil }
func (noCPUs) GetAllocatableCPUs() []int64    { return nil }

type noMemory struct{}

func (noMemory) GetMemory(string, string) []*podresourcesapi.ContainerMemory { return nil }
func (noMemory) GetAllocatableMemory() []*podresourcesapi.ContainerMemory    { return nil }

type noDRA struct{}

func (noDRA) GetDynamicResources(*corev1.Pod, *corev1.Container) []*podresourcesapi.DynamicResource {
	return nil
}

// node is a kubelet with gpushare's device plugins running on a simulated
// node with two 16 GiB GPUs.
type node struct {
	*kubelet
	gpus   *sim.Backend
	cdiDir string
	cancel context.CancelFunc
	done   chan error
}

func startNode(t testing.TB) *node { return startNodeObserved(t, nil) }

// startNodeObserved is startNode with Config.Observe set.
func startNodeObserved(t testing.TB, observe func(string, time.Duration)) *node {
	t.Helper()
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	// Unix socket paths are short: keep the directory near the root.
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	k := startKubelet(t, dir)
	gpus, err := sim.New(&sim.Config{GPUs: []sim.Group{{Model: "Tesla T4", MemoryMiB: 16384, Count: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{kubelet: k, gpus: gpus, cdiDir: filepath.Join(dir, "cdi"), cancel: cancel, done: make(chan error, 1)}
	m, err := New(klog.FromContext(ctx), Config{Node: testNode, Dir: dir, PodResourcesSocket: filepath.Join(dir, "pod-resources", "kubelet.sock"),
		CDIDir: n.cdiDir, Resources: ResourcesFrom(nil), Backend: gpus, Pods: k.getPod,
		MPS: &MPS{PipeDir: "/tmp/nvidia-mps"}, Observe: observe})
	if err != nil {
		t.Fatal(err)
	}
	go func() { n.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-n.done; err != nil {
			t.Errorf("device plugin manager: %v", err)
		}
	})
	k.waitAllocatable("gpushare.io/gpu-mem", 2*16384)
	return n
}

// gpuUUID is the simulated GPU's UUID.
func (n *node) gpuUUID(index int) string {
	devs, _ := n.gpus.Devices()
	return devs[index].UUID
}

type share struct {
	// resource is asked for amount; gpushare.io/gpu-mem for mib if empty.
	resource  string
	amount    int64
	container string
	kind      gpusharev1.ContainerKind
	gpu       int
	mib       int64
	compute   int64
}

// pod returns a pod whose containers ask gpushare.io/gpu-mem and whose
// record gives each share's container its GPU, as the scheduler writes it.
func (n *node) pod(name string, shares ...share) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}}
	a := &gpusharev1.Allocation{Node: testNode}
	for _, s := range shares {
		name, amount := corev1.ResourceName(s.resource), s.amount
		if name == "" {
			name, amount = "gpushare.io/gpu-mem", s.mib
		}
		c := corev1.Container{Name: s.container, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			name: *k8sresource.NewQuantity(amount, k8sresource.DecimalSI)}}}
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
		n.t.Fatal(err)
	}
	pod.Annotations = map[string]string{gpusharev1.AllocationAnnotation: value}
	return pod
}

// start admits the pod (Allocate, as the kubelet's admission does, one
// container at a time) and then starts the named container
// (GetDeviceRunContainerOptions, which calls PreStartContainer), and
// returns the environment its CDI device gives.
func (n *node) start(pod *corev1.Pod, container string) (env map[string]string, err error) {
	dm := n.manager()
	var c *corev1.Container
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == container {
				c = &list[i]
			}
		}
	}
	if c == nil {
		return nil, fmt.Errorf("no container %s", container)
	}
	opts, err := dm.GetDeviceRunContainerOptions(context.Background(), pod, c)
	if err != nil {
		return nil, err
	}
	if opts == nil || len(opts.CDIDevices) != 1 {
		return nil, fmt.Errorf("container options %+v: want one CDI device", opts)
	}
	claim := opts.CDIDevices[0].Name[len(CDIKind)+1:]
	lines, err := ReadSpecEnv(n.cdiDir, claim)
	if err != nil {
		return nil, err
	}
	env = map[string]string{}
	for _, l := range lines {
		for i := range len(l) {
			if l[i] == '=' {
				env[l[:i]] = l[i+1:]
				break
			}
		}
	}
	return env, nil
}

// admit runs the device manager's Allocate for every container of pod.
func (n *node) admit(pod *corev1.Pod) error {
	n.add(pod)
	dm := n.manager()
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if err := dm.Allocate(pod, &list[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

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
