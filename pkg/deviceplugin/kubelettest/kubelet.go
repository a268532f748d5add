// Package kubelettest runs the kubelet's own device manager
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager) and PodResources server
// in a test process, over a temporary directory, so that a device plugin
// is tested against the kubelet's code rather than an imitation of it.
package kubelettest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"
	_ "unsafe" // go:linkname to the device manager's constructor

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// The kubelet's device manager, in process. Its exported constructor
// hard-wires /var/lib/kubelet/device-plugins; the unexported one, which
// its own tests use, takes the socket path.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

// Kubelet is the kubelet's device manager and PodResources server over a
// plugin directory, with the pods the test adds as its active pods.
type Kubelet struct {
	t      testing.TB
	dir    string
	dm     *devicemanager.ManagerImpl
	mu     sync.Mutex
	pods   map[types.UID]*corev1.Pod
	server *grpc.Server
	// calls counts the PodResources calls served, by method name.
	calls map[string]int
}

// Start runs a Kubelet over dir: device plugins register at
// dir/kubelet.sock; the PodResources API is served at
// dir/pod-resources/kubelet.sock (PodResourcesSocket). Both stop when the
// test ends.
func Start(t testing.TB, dir string) *Kubelet {
	t.Helper()
	k := &Kubelet{t: t, dir: dir, pods: map[types.UID]*corev1.Pod{}, calls: map[string]int{}}
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
	k.server = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		k.mu.Lock()
		k.calls[path.Base(info.FullMethod)]++
		k.mu.Unlock()
		return handler(ctx, req)
	}))
	podresourcesapi.RegisterPodResourcesListerServer(k.server, podresources.NewV1PodResourcesServer(context.Background(),
		podresources.PodResourcesProviders{Pods: k, Devices: devicesProvider{k}, Cpus: noCPUs{}, Memory: noMemory{}, DynamicResources: noDRA{}}))
	go func() { _ = k.server.Serve(l) }()
	t.Cleanup(func() {
		k.server.Stop()
		_ = k.Manager().Stop(klog.Background())
	})
	return k
}

func (k *Kubelet) startDeviceManager() {
	k.t.Helper()
	logger := klog.Background()
	dm, err := newManagerImpl(logger, filepath.Join(k.dir, "kubelet.sock"), nil, noTopology{})
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

// Manager is the running device manager.
func (k *Kubelet) Manager() *devicemanager.ManagerImpl {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dm
}

// Restart stops the device manager and starts a new one on the same
// directory, as a kubelet restart does.
func (k *Kubelet) Restart() {
	if err := k.Manager().Stop(klog.Background()); err != nil {
		k.t.Fatal(err)
	}
	k.startDeviceManager()
}

// Add makes pod one of the active pods.
func (k *Kubelet) Add(pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods[pod.UID] = pod
}

// GetActivePods implements podresources.PodsProvider and the device
// manager's ActivePodsFunc.
func (k *Kubelet) GetActivePods() []*corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(k.pods))
	for _, p := range k.pods {
		out = append(out, p)
	}
	return out
}

// GetPods implements podresources.PodsProvider.
func (k *Kubelet) GetPods() []*corev1.Pod { return k.GetActivePods() }

// GetPodByName implements podresources.PodsProvider.
func (k *Kubelet) GetPodByName(namespace, name string) (*corev1.Pod, bool) {
	for _, p := range k.GetActivePods() {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// GetPod finds an active pod; a deviceplugin.PodGetter.
func (k *Kubelet) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	if p, ok := k.GetPodByName(namespace, name); ok {
		return p, nil
	}
	return nil, fmt.Errorf("pod %s/%s not found", namespace, name)
}

// Allocatable returns the device manager's allocatable count of resource.
func (k *Kubelet) Allocatable(resource string) int64 {
	_, alloc, _ := k.Manager().GetCapacity(klog.Background())
	q := alloc[corev1.ResourceName(resource)]
	return q.Value()
}

// WaitAllocatable waits up to 90 s for resource's allocatable count.
func (k *Kubelet) WaitAllocatable(resource string, want int64) {
	k.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for k.Allocatable(resource) != want {
		if time.Now().After(deadline) {
			k.t.Fatalf("%s allocatable is %d, want %d", resource, k.Allocatable(resource), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// devicesProvider adapts the device manager to the PodResources server,
// as the kubelet's container manager does: one entry per device.
type devicesProvider struct{ k *Kubelet }

func (d devicesProvider) UpdateAllocatedDevices(logger klog.Logger) {
	d.k.Manager().UpdateAllocatedDevices(logger)
}

func (d devicesProvider) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	return containerDevices(d.k.Manager().GetDevices(podUID, containerName))
}

func (d devicesProvider) GetAllocatableDevices(logger klog.Logger) []*podresourcesapi.ContainerDevices {
	return containerDevices(d.k.Manager().GetAllocatableDevices(logger))
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

func (noCPUs) GetCPUs(*corev1.Pod, *corev1.Container) []int64 { return nil }
func (noCPUs) GetPodCPUs(string) []int64                      { return nil }
func (noCPUs) GetAllocatableCPUs() []int64                    { return nil }

type noMemory struct{}

func (noMemory) GetMemory(klog.Logger, *corev1.Pod, *corev1.Container) []*podresourcesapi.ContainerMemory {
	return nil
}
func (noMemory) GetPodMemory(klog.Logger, string) []*podresourcesapi.ContainerMemory { return nil }
func (noMemory) GetAllocatableMemory(klog.Logger) []*podresourcesapi.ContainerMemory { return nil }

type noDRA struct{}

func (noDRA) GetDynamicResources(klog.Logger, *corev1.Pod, *corev1.Container) []*podresourcesapi.DynamicResource {
	return nil
}

// PodResourcesCalls returns how many PodResources calls were served, by
// method ("List", "Get").
func (k *Kubelet) PodResourcesCalls() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.calls)
}

// PodResourcesSocket is where the PodResources API is served.
func (k *Kubelet) PodResourcesSocket() string {
	return filepath.Join(k.dir, "pod-resources", "kubelet.sock")
}

// Admit admits pod as the kubelet does, after adding it to the active
// pods: its admit handlers in the kubelet's order, the device manager's
// Allocate for every container (init containers first), then the
// kubelet's resource fit (lifecycle's predicate admit handler) against a
// node whose allocatable is ample CPU, memory and pods plus the device
// manager's allocatable devices, as the kubelet's node status says.
// Extended resources that no device plugin serves are not counted there:
// the kubelet leaves out those the node does not advertise.
func (k *Kubelet) Admit(pod *corev1.Pod) error {
	k.Add(pod)
	dm := k.Manager()
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if err := dm.Allocate(context.Background(), pod, &list[i], lifecycle.AddOperation); err != nil {
				return err
			}
		}
	}
	var others []*corev1.Pod
	for _, p := range k.GetActivePods() {
		if p.UID != pod.UID {
			others = append(others, p)
		}
	}
	fit := lifecycle.NewPredicateAdmitHandler(func(context.Context, bool) (*corev1.Node, error) { return k.node(pod.Spec.NodeName), nil },
		lifecycle.NewAdmissionFailureHandlerStub(), dm.UpdatePluginResources)
	if r := fit.Admit(context.Background(), &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: others, Operation: lifecycle.AddOperation}); !r.Admit {
		return fmt.Errorf("pod %s/%s not admitted: %s: %s", pod.Namespace, pod.Name, r.Reason, r.Message)
	}
	return nil
}

// node is the kubelet's Node, named name ("node" if empty).
func (k *Kubelet) node(name string) *corev1.Node {
	if name == "" {
		name = "node"
	}
	allocatable := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("256"),
		corev1.ResourceMemory: resource.MustParse("2Ti"),
		corev1.ResourcePods:   resource.MustParse("1000"),
	}
	_, devices, _ := k.Manager().GetCapacity(klog.Background())
	maps.Copy(allocatable, devices)
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Capacity: allocatable, Allocatable: allocatable}}
}

// StartContainer returns what the device manager gives the named
// container as it starts (GetDeviceRunContainerOptions, which calls the
// plugins' PreStartContainer).
func (k *Kubelet) StartContainer(pod *corev1.Pod, container string) (*devicemanager.DeviceRunContainerOptions, error) {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == container {
				return k.Manager().GetDeviceRunContainerOptions(context.Background(), pod, &list[i])
			}
		}
	}
	return nil, fmt.Errorf("pod %s/%s has no container %s", pod.Namespace, pod.Name, container)
}

// Clear forgets every active pod.
func (k *Kubelet) Clear() {
	k.mu.Lock()
	defer k.mu.Unlock()
	clear(k.pods)
}

// noTopology is a topology store without NUMA affinity (the kubelet's
// "none" policy), quiet unlike topologymanager's fake, which logs every
// call.
type noTopology struct{}

func (noTopology) GetAffinity(klog.Logger, string, string) topologymanager.TopologyHint {
	return topologymanager.TopologyHint{}
}
func (noTopology) GetPolicy() topologymanager.Policy { return topologymanager.NewNonePolicy() }
func (noTopology) Name() string                      { return "none" }
