package deviceplugin

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/deviceplugin/runtimetest"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpu/sim"
	"github.com/gpushare/gpushare/pkg/holder"
	"github.com/gpushare/gpushare/pkg/resource"
)

// 100 identical pods start on one node at once: each container gets the
// GPU its own record names, never a neighbour's. Both ways of finding a
// container: node listings, and Gets of the pods the latest does not show
// (with the node's pods at hand); listings only (without).
func TestConcurrentIdenticalPods(t *testing.T) {
	t.Run("listings and pods", func(t *testing.T) { concurrentIdenticalPods(t, startNode(t)) })
	t.Run("listings", func(t *testing.T) {
		concurrentIdenticalPods(t, startNodeWith(t, func(c *testConfig) { c.Claims.NodePods = nil }))
	})
}

func concurrentIdenticalPods(t *testing.T, n *node) {
	const pods, mib = 100, 300
	all := make([]*corev1Pod, pods)
	for i := range all {
		// Identical MPS requests; the scheduler put even pods on GPU 0
		// and odd ones on GPU 1.
		all[i] = n.pod(fmt.Sprintf("same-%03d", i), share{container: "main", kind: gpusharev1.ContainerApp, gpu: i % 2, mib: mib, compute: 10,
			resource: "keti.com/mpsgpu", amount: 1})
	}
	// Admission is serial in the kubelet; container starts are not.
	for _, p := range all {
		if err := n.admit(p); err != nil {
			t.Fatalf("admitting %s: %v", p.Name, err)
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		times []time.Duration
	)
	for i, p := range all {
		wg.Go(func() {
			start := time.Now()
			opts, err := n.StartContainer(p, "main")
			took := time.Since(start)
			mu.Lock()
			times = append(times, took)
			mu.Unlock()
			if err != nil {
				t.Errorf("starting %s: %v", p.Name, err)
				return
			}
			c, err := n.apply(opts)
			if err != nil {
				t.Errorf("creating %s: %v", p.Name, err)
				return
			}
			env := c.Env
			if want := n.gpuUUID(i % 2); env["NVIDIA_VISIBLE_DEVICES"] != want {
				t.Errorf("pod %s was recorded on GPU %d (%s) but its container sees %q", p.Name, i%2, want, env["NVIDIA_VISIBLE_DEVICES"])
			}
			if env["GPUSHARE_GPU_MEMORY_MIB"] != fmt.Sprint(mib) || env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != fmt.Sprintf("0=%dM", mib) ||
				env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "10" {
				t.Errorf("pod %s: environment %v does not carry its own %d MiB and 10%% limits", p.Name, env, mib)
			}
		})
	}
	wg.Wait()
	slices.Sort(times)
	t.Logf("PreStartContainer through the device manager, %d containers at once: p50 %v, p99 %v",
		pods, times[len(times)/2], times[len(times)*99/100])
}

// A pod with an init container and two app containers on different GPUs:
// each container gets its own share, and only the container that asks
// for MPS (tokenizer) is an MPS client with its own thread percentage.
func TestMultiContainerPod(t *testing.T) {
	n := startNode(t)
	p := n.pod("multi",
		share{container: "warm", kind: gpusharev1.ContainerInit, gpu: 1, mib: 2048},
		share{container: "server", kind: gpusharev1.ContainerApp, gpu: 0, mib: 8192, compute: 50},
		share{container: "tokenizer", kind: gpusharev1.ContainerApp, gpu: 1, mib: 1024, compute: 20, resource: "keti.com/mpsgpu", amount: 1})
	if err := n.admit(p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		container string
		gpu       int
		mib       string
		threads   string
	}{{"warm", 1, "2048", ""}, {"server", 0, "8192", ""}, {"tokenizer", 1, "1024", "20"}} {
		env, err := n.start(p, want.container)
		if err != nil {
			t.Fatalf("%s: %v", want.container, err)
		}
		if env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(want.gpu) || env["GPUSHARE_GPU_MEMORY_MIB"] != want.mib ||
			env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != want.threads {
			t.Errorf("container %s: %v; want GPU %d, %s MiB, thread percentage %q", want.container, env, want.gpu, want.mib, want.threads)
		}
	}
}

// TestMPSMounts checks, through the CDI library that runtimes use, what a
// container's CDI device mounts: under MPS the pipe directory, and the
// MPS daemon's /dev/shm in place of the pod's own (so that the pod needs
// no hostIPC) unless the node keeps its /dev/shm. Only a container that
// asks for MPS (keti.com/mpsgpu) is an MPS client: one that asks
// gpushare.io/gpu-mem on the same node gets neither, and runs as a plain
// CUDA context beside the MPS server.
func TestMPSMounts(t *testing.T) {
	for name, tc := range map[string]struct {
		mps        *MPS
		asks       string
		pipe, shm  string
		wantMPSEnv bool
	}{
		"MPS": {mps: &MPS{PipeDir: testPipeDir, ShmDir: testShmDir}, asks: "keti.com/mpsgpu",
			pipe: testPipeDir, shm: testShmDir, wantMPSEnv: true},
		"MPS with the node's shm": {mps: &MPS{PipeDir: testPipeDir}, asks: "keti.com/mpsgpu",
			pipe: testPipeDir, shm: runtimetest.PodShm, wantMPSEnv: true},
		"MPS node, memory asked":  {mps: &MPS{PipeDir: testPipeDir, ShmDir: testShmDir}, asks: "gpushare.io/gpu-mem", shm: runtimetest.PodShm},
		"MPS node, compute asked": {mps: &MPS{PipeDir: testPipeDir, ShmDir: testShmDir}, asks: "gpushare.io/gpu-core", shm: runtimetest.PodShm},
		"no MPS":                  {asks: "keti.com/mpsgpu", shm: runtimetest.PodShm},
	} {
		t.Run(name, func(t *testing.T) {
			n := startNodeWith(t, func(c *testConfig) { c.Claims.MPS = tc.mps })
			amount := map[string]int64{"keti.com/mpsgpu": 1, "gpushare.io/gpu-mem": 4096, "gpushare.io/gpu-core": 30}[tc.asks]
			p := n.pod("m", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 1, mib: 4096, compute: 30,
				resource: tc.asks, amount: amount})
			if err := n.admit(p); err != nil {
				t.Fatal(err)
			}
			c, err := n.create(p, "main")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Mounts["/dev/shm"]; got != tc.shm {
				t.Errorf("/dev/shm is %q, want %q", got, tc.shm)
			}
			if got, ok := c.Mounts[testPipeDir]; got != tc.pipe || ok != (tc.pipe != "") {
				t.Errorf("pipe directory mounted from %q (%v), want %q", got, ok, tc.pipe)
			}
			for _, v := range []string{"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"} {
				if _, ok := c.Env[v]; ok != tc.wantMPSEnv {
					t.Errorf("%s=%q; want it set %v", v, c.Env[v], tc.wantMPSEnv)
				}
			}
			if c.Env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(1) || c.Env["PATH"] == "" {
				t.Errorf("environment %v: want GPU 1 and the container's own PATH", c.Env)
			}
		})
	}
}

// Pods without a valid record for this node get a clear error, and
// nothing is handed out.
func TestBadRecords(t *testing.T) {
	model, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, func(c *testConfig) { c.Claims.Requests = model.PodRequest })
	good := n.pod("x", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 0, mib: 512})
	cases := map[string]struct {
		edit func(p *corev1Pod)
		want string
	}{
		"no record":  {func(p *corev1Pod) { delete(p.Annotations, gpusharev1.AllocationAnnotation) }, "has no gpushare.io/allocation annotation"},
		"malformed":  {func(p *corev1Pod) { p.Annotations[gpusharev1.AllocationAnnotation] = "{not json" }, "gpushare.io/allocation"},
		"other node": {func(p *corev1Pod) { setRecord(t, p, func(a *gpusharev1.Allocation) { a.Node = "node-b" }) }, "its allocation is for node node-b"},
		"foreign GPU": {func(p *corev1Pod) {
			setRecord(t, p, func(a *gpusharev1.Allocation) { a.Containers[0].GPUs[0].UUID = "GPU-elsewhere" })
		}, holder.ErrNoGPU.Error()},
		// Records written by hand: more than the container asks for, or
		// on a pod the scheduler did not bind here.
		"more memory than asked": {func(p *corev1Pod) {
			setRecord(t, p, func(a *gpusharev1.Allocation) { a.Containers[0].GPUs[0].MemoryMiB = 16384 })
		}, "books 16384 MiB and 0% compute, the container asks for 512 MiB"},
		"another GPU container": {func(p *corev1Pod) {
			setRecord(t, p, func(a *gpusharev1.Allocation) {
				a.Containers = append(a.Containers, gpusharev1.ContainerAllocation{Name: "extra", Kind: gpusharev1.ContainerApp,
					GPUs: []gpusharev1.GPUShare{a.Containers[0].GPUs[0]}})
			})
		}, "names 2 GPU containers, the pod has 1"},
		"not bound here": {func(p *corev1Pod) { p.Spec.NodeName = "node-b" }, "pod is bound to node node-b but its allocation is for node node-a"},
		"no such container": {func(p *corev1Pod) {
			setRecord(t, p, func(a *gpusharev1.Allocation) { a.Containers[0].Name = "other" })
		}, `GPU container 0 is app "other", the pod's is app "main"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := good.DeepCopy()
			p.Name, p.UID = "bad-"+strings.ReplaceAll(name, " ", "-"), corev1UID("bad-"+name)
			c.edit(p)
			if err := n.admit(p); err != nil {
				t.Fatal(err)
			}
			env, err := n.start(p, "main")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("start gave %v, %v; want an error containing %q", env, err, c.want)
			}
		})
	}
}

// After a kubelet restart the plugins register again, and containers of
// pods admitted before it still get their GPUs.
func TestKubeletRestart(t *testing.T) {
	n := startNode(t)
	before := n.pod("before", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 1, mib: 4096})
	if err := n.admit(before); err != nil {
		t.Fatal(err)
	}
	n.Restart()
	n.WaitAllocatable("gpushare.io/gpu-mem", 2*16384)
	after := n.pod("after", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 0, mib: 2048})
	if err := n.admit(after); err != nil {
		t.Fatal(err)
	}
	for p, gpu := range map[*corev1Pod]int{before: 1, after: 0} {
		env, err := n.start(p, "main")
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		if env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(gpu) {
			t.Errorf("%s sees %q, want GPU %d", p.Name, env["NVIDIA_VISIBLE_DEVICES"], gpu)
		}
	}
}

// The devices of a resource at DefaultMaxDevices fit the kubelet's 4 MiB
// message; a node whose MiB devices would not is refused with the reason.
func TestListAndWatchFitsMessageLimit(t *testing.T) {
	big := make([]gpu.Device, 8)
	for i := range big {
		big[i] = gpu.Device{Index: i, UUID: fmt.Sprintf("GPU-%d", i), MemoryMiB: 144384, Healthy: true}
	}
	mib := Resource{Name: "gpushare.io/gpu-mem", Kind: "Memory", UnitMiB: 1}
	if _, err := mib.deviceList(big, defaultSizing); err == nil || !strings.Contains(err.Error(), "4 MiB message limit") {
		t.Fatalf("8 x 141 GiB in MiB devices: %v; want the message-limit error", err)
	}
	gib := Resource{Name: "aliyun.com/gpu-mem", Kind: "Memory", UnitMiB: 1024}
	if devs, err := gib.deviceList(big, defaultSizing); err != nil || len(devs) != 8*141 {
		t.Fatalf("8 x 141 GiB in GiB devices: %d devices, %v", len(devs), err)
	}
	// The largest MiB node that is served: DefaultMaxDevices MiB over 8
	// GPUs, the longest IDs.
	edge := make([]gpu.Device, 8)
	for i := range edge {
		edge[i] = gpu.Device{Index: i, UUID: fmt.Sprintf("GPU-%d", i), MemoryMiB: DefaultMaxDevices / 8, Healthy: true}
	}
	devs, err := mib.deviceList(edge, defaultSizing)
	if err != nil {
		t.Fatal(err)
	}
	size := proto.Size(&pluginapi.ListAndWatchResponse{Devices: devs})
	t.Logf("ListAndWatch with %d devices: %d bytes", len(devs), size)
	if size >= 4<<20 {
		t.Errorf("ListAndWatch with %d devices is %d bytes, over the kubelet's 4 MiB limit", len(devs), size)
	}
}

// defaultSizing is a Config's sizing with every count defaulted.
var defaultSizing = sizing{slots: DefaultSlotsPerGPU, hooks: DefaultHookDevices, maxDevices: DefaultMaxDevices}

// TestPreferredAllocationOnlyForShortLists: GetPreferredAllocation is
// offered for short device lists (compute tokens), not for MiB tokens,
// where the kubelet would send every available ID with each container.
func TestPreferredAllocationOnlyForShortLists(t *testing.T) {
	gpus := []gpu.Device{{Index: 0, MemoryMiB: 16384, Healthy: true}, {Index: 1, MemoryMiB: 16384, Healthy: true}}
	for _, c := range []struct {
		res  Resource
		want bool
	}{
		{Resource{Name: "gpushare.io/gpu-mem", Kind: "Memory", UnitMiB: 1}, false},
		{Resource{Name: "aliyun.com/gpu-mem", Kind: "Memory", UnitMiB: 1024}, true},
		{Resource{Name: "gpushare.io/gpu-core", Kind: "Compute"}, true},
		{hook(), true},
	} {
		n, err := c.res.count(gpus, defaultSizing)
		if err != nil {
			t.Fatal(err)
		}
		p := &plugin{res: c.res, gpus: gpus, count: n}
		opts, err := p.GetDevicePluginOptions(t.Context(), &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		if opts.GetGetPreferredAllocationAvailable() != c.want || !opts.GetPreStartRequired() {
			t.Errorf("%s (%d devices): options %+v, want preferred allocation %v and pre-start", c.res.Name, n, opts, c.want)
		}
	}
}

// bigNode is a node of 8 x 141 GiB GPUs (H200) with the default resource
// model: its MiB resources need 1.15 million devices, too many for the
// kubelet's message limit, and are not served.
func bigNode(t *testing.T) *node {
	t.Helper()
	big, err := sim.New(&sim.Config{GPUs: []sim.Group{{Model: "NVIDIA H200", MemoryMiB: 144384, Count: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	return startNodeWith(t, func(c *testConfig) { c.Backend = big })
}

// TestBigGPUs: on a node of 8 x 141 GiB GPUs, containers that ask GPU
// memory in MiB start with the GPU and MiB share of their records,
// through the hook resource: 100 pods at once, with the kubelet's own
// admission (which does not count the MiB resource no plugin serves) and
// device manager. A container that asks GPU memory in GiB devices and
// holds a hook too gets its GPU through the hook, and only a note through
// the other. Without a hook the kubelet calls no device plugin for the
// container (why the hook policy adds hooks to every GPU container).
func TestBigGPUs(t *testing.T) {
	n := bigNode(t)
	skipped := slices.Sorted(maps.Keys(n.m.Skipped()))
	if want := []string{"elasticgpu.io/gpu-memory", "gpushare.io/gpu-mem"}; !slices.Equal(skipped, want) {
		t.Fatalf("resources not served: %v, want %v", skipped, want)
	}
	if got := n.Allocatable(gpusharev1.HookResource); got != DefaultHookDevices {
		t.Fatalf("%s allocatable %d, want %d", gpusharev1.HookResource, got, DefaultHookDevices)
	}
	if got := n.Allocatable("gpushare.io/gpu-mem"); got != 0 {
		t.Fatalf("gpushare.io/gpu-mem allocatable %d, want none", got)
	}

	// 100 pods, 100,000 MiB each in all 12.5 times what 150,000 MiB
	// devices would allow; pod i on GPU i%8.
	const pods, mib = 100, 10_000
	all := make([]*corev1Pod, pods)
	for i := range all {
		all[i] = n.pod(fmt.Sprintf("big-%03d", i), share{container: "main", kind: gpusharev1.ContainerApp, gpu: i % 8, mib: mib + int64(i), hooks: 1})
		if err := n.admit(all[i]); err != nil {
			t.Fatalf("admitting %s: %v", all[i].Name, err)
		}
	}
	var wg sync.WaitGroup
	for i, p := range all {
		wg.Go(func() {
			env, err := n.start(p, "main")
			if err != nil {
				t.Errorf("starting %s: %v", p.Name, err)
				return
			}
			own := fmt.Sprint(mib + i)
			if want := n.gpuUUID(i % 8); env["NVIDIA_VISIBLE_DEVICES"] != want || env["GPUSHARE_GPU_MEMORY_MIB"] != own {
				t.Errorf("pod %s was recorded on GPU %d (%s) with %s MiB; its container sees %v", p.Name, i%8, want, own, env)
			}
		})
	}
	wg.Wait()

	// GiB devices and a hook: two CDI devices, the hook's with the GPU.
	both := n.pod("both", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 3, resource: "aliyun.com/gpu-mem", amount: 4, mib: 4096, hooks: 1})
	if err := n.admit(both); err != nil {
		t.Fatal(err)
	}
	opts, err := n.StartContainer(both, "main")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range opts.CDIDevices {
		names = append(names, d.Name)
	}
	c, err := n.runtime.Create(names)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 || c.Env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(3) || c.Env["GPUSHARE_GPU_MEMORY_MIB"] != "4096" {
		t.Errorf("GiB devices and a hook: CDI devices %v give %v; want two, for GPU 3 with 4096 MiB", names, c.Env)
	}
	gib := cdi.Kind + "=" + cdi.ClaimOf("aliyun.com/gpu-mem", n.deviceIDs(both, "main", "aliyun.com/gpu-mem"))
	if c, err := n.runtime.Create([]string{gib}); err != nil || c.Env["NVIDIA_VISIBLE_DEVICES"] != "" || c.Env["GPUSHARE_GPUS_VIA"] != gpusharev1.HookResource {
		t.Errorf("the GiB devices' CDI device gives %+v (%v); want only a note that the hook gives the GPUs", c, err)
	}

	// No hook: admitted, but no plugin hears of the container.
	bare := n.pod("no-hook", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 0, mib: 1024})
	if err := n.admit(bare); err != nil {
		t.Fatal(err)
	}
	if opts, err := n.StartContainer(bare, "main"); err != nil || opts != nil {
		t.Errorf("a container without a hook: options %+v, %v; want none", opts, err)
	}
}

// TestHookedInitContainer: an init container and the app container after
// it ask the same GPU memory, on different GPUs. The app container reuses
// the init container's memory devices, so those do not tell the two
// apart, and the pod's status may not show the init container finished
// yet when the app container starts. Their hooks do: one for the init
// container, two for the app container (deploy/gpu-hook-policy.yaml),
// and the memory devices' CDI device carries no GPU of its own. Each
// container gets its own GPU, the status notwithstanding.
func TestHookedInitContainer(t *testing.T) {
	n := startNode(t)
	p := n.pod("init-app",
		share{container: "warm", kind: gpusharev1.ContainerInit, gpu: 0, mib: 1024, hooks: 1},
		share{container: "main", kind: gpusharev1.ContainerApp, gpu: 1, mib: 1024, hooks: 2})
	if err := n.admit(p); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(n.deviceIDs(p, "warm", "gpushare.io/gpu-mem"), n.deviceIDs(p, "main", "gpushare.io/gpu-mem")) {
		t.Fatal("the app container does not reuse the init container's memory devices")
	}
	// Neither start finds the init container finished in the status.
	for container, gpu := range map[string]int{"warm": 0, "main": 1} {
		opts, err := n.StartContainer(p, container)
		if err != nil {
			t.Fatalf("%s: %v", container, err)
		}
		var names []string
		for _, d := range opts.CDIDevices {
			names = append(names, d.Name)
		}
		c, err := n.runtime.Create(names)
		if err != nil {
			t.Fatalf("%s: %v", container, err)
		}
		if c.Env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(gpu) {
			t.Errorf("container %s (CDI devices %v) sees %q; its record gives it GPU %d", container, names, c.Env["NVIDIA_VISIBLE_DEVICES"], gpu)
		}
	}
}

// TestHooksNotAllocated: a container whose spec asks for hooks but to
// which the kubelet gave none (the hook resource was not registered when
// it admitted the pod, and it leaves out requests of resources the node
// does not advertise) gets its GPU through its memory devices.
func TestHooksNotAllocated(t *testing.T) {
	n := startNodeWith(t, func(c *testConfig) { c.HookDevices = -1 })
	p := n.pod("no-hooks-given", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 1, mib: 2048, hooks: 1})
	if err := n.admit(p); err != nil {
		t.Fatal(err)
	}
	if ids := n.deviceIDs(p, "main", gpusharev1.HookResource); len(ids) != 0 {
		t.Fatalf("the kubelet gave the container hooks %v", ids)
	}
	env, err := n.start(p, "main")
	if err != nil {
		t.Fatal(err)
	}
	if env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(1) || env["GPUSHARE_GPU_MEMORY_MIB"] != "2048" {
		t.Errorf("the container sees %v; its record gives it GPU 1 with 2048 MiB", env)
	}
}

// TestHookMemory: with HookMemory (gpushare-node --hook-memory) a node of
// small GPUs serves no device per MiB, as a node of big GPUs must: the
// kubelet admits a container asking GPU memory in MiB without counting
// it, and the container gets its recorded GPU and MiB through its hook.
// Resources counted in GiB keep their devices.
func TestHookMemory(t *testing.T) {
	n := startNodeWith(t, func(c *testConfig) { c.HookMemory = true })
	skipped := slices.Sorted(maps.Keys(n.m.Skipped()))
	if want := []string{"elasticgpu.io/gpu-memory", "gpushare.io/gpu-mem"}; !slices.Equal(skipped, want) {
		t.Fatalf("resources not served: %v, want %v", skipped, want)
	}
	if got := n.Allocatable("gpushare.io/gpu-mem"); got != 0 {
		t.Errorf("gpushare.io/gpu-mem allocatable %d, want none", got)
	}
	if got := n.Allocatable("aliyun.com/gpu-mem"); got != 2*16 {
		t.Errorf("aliyun.com/gpu-mem allocatable %d, want 32 (GiB of two 16 GiB GPUs)", got)
	}
	p := n.pod("hooked", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 1, mib: 3500, hooks: 1})
	if err := n.admit(p); err != nil {
		t.Fatal(err)
	}
	env, err := n.start(p, "main")
	if err != nil {
		t.Fatal(err)
	}
	if env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(1) || env["GPUSHARE_GPU_MEMORY_MIB"] != "3500" {
		t.Errorf("a container recorded on GPU 1 with 3500 MiB sees %v", env)
	}
}
