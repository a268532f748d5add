package integration

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/deviceplugin/kubelettest"
	"github.com/gpushare/gpushare/pkg/deviceplugin/runtimetest"
)

// TestDevicePluginEndToEnd: gpushare-scheduler records each pod's GPU;
// the kubelet's device manager (in this process) admits the pods and
// starts their containers through gpushare-node's device plugins; every
// container's environment names exactly the GPU and share of its record.
// 100 identical pods start at once on one node of 8 GPUs. The daemon's
// call latency histogram counts each call. The node shares its GPUs under
// MPS (with a stand-in for the MPS control daemon): the daemon sees its
// shm directory as /dev/shm, and each container that asks for MPS
// (keti.com/mpsgpu, every other pod) gets that directory at /dev/shm and
// the pipe directory, so that it needs no hostIPC; the others, asking
// gpushare.io/gpu-mem, share the same GPUs as plain CUDA contexts.
func TestDevicePluginEndToEnd(t *testing.T) {
	t.Parallel()
	// Binding the MPS daemon's /dev/shm needs root, as on a node.
	mps := os.Geteuid() == 0
	if !mps {
		t.Log("Not root: the node runs without MPS")
	}
	n := startGPUNode(t, gpuNodeOptions{mps: mps})
	const pods = 100
	bound, _ := n.burst(t, "same", pods)
	gpus := map[string]bool{}
	for i := range bound {
		gpus[record(t, &bound[i]).Containers[0].GPUs[0].UUID] = true
	}
	t.Logf("%d containers started on %d GPUs, each with its recorded GPU", pods, len(gpus))
	if rss, err := residentMiB(n.daemon.Cmd.Process.Pid); err == nil {
		peak, _ := peakResidentMiB(n.daemon.Cmd.Process.Pid)
		t.Logf("gpushare-node RSS with 8 GPUs and %d pods, as the last started: %.1f MiB (peak %.1f MiB)", pods, rss, peak)
	}
	calls := n.calls(t)
	if calls["Allocate"].count != pods || calls["PreStartContainer"].count != pods {
		t.Errorf("gpushare-node counted %d Allocate and %d PreStartContainer calls; want %d each",
			calls["Allocate"].count, calls["PreStartContainer"].count, pods)
	}
	// The MPS daemon marked the directory its clients share, not the
	// node's /dev/shm.
	if n.mps != nil {
		if _, err := os.Stat(filepath.Join(n.mps.ShmDir, "gpushare-e2e-mps-daemon")); err != nil {
			t.Errorf("the MPS daemon's /dev/shm is not %s: %v", n.mps.ShmDir, err)
		}
		if _, err := os.Stat("/dev/shm/gpushare-e2e-mps-daemon"); !os.IsNotExist(err) {
			_ = os.Remove("/dev/shm/gpushare-e2e-mps-daemon")
			t.Errorf("the MPS daemon wrote into the node's /dev/shm (%v)", err)
		}
	}
	// Between bursts the daemon drops its PodResources listing and gives
	// the memory back.
	time.Sleep(5 * time.Second)
	if rss, err := residentMiB(n.daemon.Cmd.Process.Pid); err == nil {
		t.Logf("gpushare-node RSS with 8 GPUs and %d pods, settled: %.1f MiB", pods, rss)
	}
}

// TestBigGPUsEndToEnd: a node of 8 x 141 GiB GPUs whose pods ask
// gpushare.io/gpu-mem in MiB, 1.15 million MiB in all, beyond what the
// kubelet takes in device plugin devices. With deploy/gpu-hook-policy.yaml
// in force, 100 pods of 10,000 MiB (a million MiB) are scheduled, admitted
// by the kubelet's own admission and device manager and started at once;
// each container's environment names the GPU and MiB of its record,
// handed over through its hook.
func TestBigGPUsEndToEnd(t *testing.T) {
	t.Parallel()
	n := startGPUNode(t, gpuNodeOptions{big: true})
	const pods = 100
	bound, _ := n.burst(t, "big", pods)
	var booked int64
	perGPU := map[int]int{}
	for i := range bound {
		g := record(t, &bound[i]).Containers[0].GPUs[0]
		booked += g.MemoryMiB
		perGPU[g.Index]++
		if got := hooks(&bound[i])["main"]; got != [2]string{"1", "1"} {
			t.Errorf("pod %s holds hooks (limits, requests) %v; want 1 and 1", bound[i].Name, got)
		}
	}
	if booked <= deviceplugin.DefaultMaxDevices {
		t.Errorf("the pods book %d MiB; the test needs more than the %d a device plugin could count", booked, deviceplugin.DefaultMaxDevices)
	}
	calls := n.calls(t)
	if calls["Allocate"].count != pods || calls["PreStartContainer"].count != pods {
		t.Errorf("gpushare-node counted %d Allocate and %d PreStartContainer calls; want %d each (hooks)",
			calls["Allocate"].count, calls["PreStartContainer"].count, pods)
	}
	t.Logf("%d containers started with %d MiB booked in all, GPUs by index: %v", pods, booked, perGPU)
}

// TestHookMemoryEndToEnd: gpushare-node --hook-memory on 16 GiB GPUs, with
// deploy/gpu-hook-policy.yaml in force: the kubelet has no device per MiB,
// and 50 pods of 1 GiB, scheduled and started at once, each get the GPU
// and MiB of their records through their hooks, as the chart installs
// gpushare on Kubernetes 1.36 and later.
func TestHookMemoryEndToEnd(t *testing.T) {
	t.Parallel()
	n := startGPUNode(t, gpuNodeOptions{hookMemory: true})
	if got := n.kubelet.Allocatable("gpushare.io/gpu-mem"); got != 0 {
		t.Errorf("the kubelet has %d gpushare.io/gpu-mem devices; want none", got)
	}
	const pods = 50
	bound, _ := n.burst(t, "hooked", pods)
	for i := range bound {
		if got := hooks(&bound[i])["main"]; got != [2]string{"1", "1"} {
			t.Errorf("pod %s holds hooks (limits, requests) %v; want 1 and 1", bound[i].Name, got)
		}
	}
	calls := n.calls(t)
	if calls["Allocate"].count != pods || calls["PreStartContainer"].count != pods {
		t.Errorf("gpushare-node counted %d Allocate and %d PreStartContainer calls; want %d each (hooks)",
			calls["Allocate"].count, calls["PreStartContainer"].count, pods)
	}
}

// BenchmarkDevicePluginStart100 is the node daemon's latency target as
// deployed: gpushare-node in a process of its own, the kubelet's device
// manager in this one. Each op schedules 100 identical 1 GiB pods,
// admits them one by one and starts their containers at once, then
// deletes them. It reports the p99 of gpushare-node's own Allocate and
// PreStartContainer times, read from its latency histogram (the upper
// bound of the bucket that holds the 99th percentile), the kubelet's
// start time per container, p50 and p99, and the share of containers
// resolved ahead of their start.
//
//	make bench-deviceplugin
func BenchmarkDevicePluginStart100(b *testing.B) { benchStart100(b, gpuNodeOptions{}) }

// BenchmarkDevicePluginStart100BigGPUs is BenchmarkDevicePluginStart100 on
// 8 x 141 GiB GPUs, pods of 10,000 MiB: each container reaches the
// device plugin through its hook (deploy/gpu-hook-policy.yaml).
func BenchmarkDevicePluginStart100BigGPUs(b *testing.B) { benchStart100(b, gpuNodeOptions{big: true}) }

// BenchmarkDevicePluginStart100GiB is BenchmarkDevicePluginStart100 with
// one device per GiB: the pods ask aliyun.com/gpu-mem 1 (GiB, as in the
// Aliyun system), so the kubelet counts 128 devices instead of 131,072.
func BenchmarkDevicePluginStart100GiB(b *testing.B) { benchStart100(b, gpuNodeOptions{gib: true}) }

// BenchmarkDevicePluginStart100Hooks is BenchmarkDevicePluginStart100
// through hooks (gpushare-node --hook-memory, deploy/gpu-hook-policy.yaml):
// the same 16 GiB GPUs and 1 GiB pods, no device per MiB.
func BenchmarkDevicePluginStart100Hooks(b *testing.B) {
	benchStart100(b, gpuNodeOptions{hookMemory: true})
}

func benchStart100(b *testing.B, o gpuNodeOptions) {
	n := startGPUNode(b, o)
	before := n.calls(b)
	var starts []time.Duration
	round := 0
	for b.Loop() {
		round++
		_, took := n.burst(b, fmt.Sprintf("r%d", round), 100)
		starts = append(starts, took...)
		b.StopTimer()
		n.clear(b)
		b.StartTimer()
	}
	after := n.calls(b)
	for _, method := range []string{"Allocate", "PreStartContainer"} {
		h := after[method].sub(before[method])
		b.ReportMetric(h.quantile(0.5)*1000, strings.ToLower(method)+"-p50-ms")
		b.ReportMetric(h.quantile(0.99)*1000, strings.ToLower(method)+"-p99-ms")
		b.Logf("%s: %d calls; at most (s): count %v", method, h.count, h.buckets())
	}
	// How each container was resolved: ahead of its start by the
	// prefetch, or by PreStartContainer (the daemon logs each at -v=2).
	if log, err := os.ReadFile(n.daemon.Log); err == nil {
		ahead, now := bytes.Count(log, []byte(`resolved="ahead"`)), bytes.Count(log, []byte(`resolved="now"`))
		b.Logf("containers resolved ahead of their start: %d; when they started: %d", ahead, now)
		b.ReportMetric(100*float64(ahead)/float64(max(ahead+now, 1)), "resolved-ahead-%")
	}
	slices.Sort(starts)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(starts[len(starts)/2]), "kubelet-start-p50-ms")
	b.ReportMetric(ms(starts[len(starts)*99/100]), "kubelet-start-p99-ms")
}

// gpuNode is a node of 8 simulated GPUs served by gpushare-node,
// with the kubelet's device manager in this process.
type gpuNode struct {
	client     kubernetes.Interface
	kubelet    *kubelettest.Kubelet
	daemon     *controlplane.Process
	cdiDir     string
	metricsURL string
	// runtime applies the containers' CDI devices.
	runtime *runtimetest.Runtime
	// mps holds the MPS directories when the node shares its GPUs under
	// MPS.
	mps *deviceplugin.MPS
	// podMiB is what burst's pods ask.
	podMiB int64
	// gib: burst's pods ask podMiB in GiB of aliyun.com/gpu-mem.
	gib bool
}

// fakeMPSControl stands in for nvidia-cuda-mps-control: "-f" marks its
// /dev/shm and runs until a "quit" command or until its parent, the
// daemon, is gone; the client answers while the daemon runs.
const fakeMPSControl = `#!/bin/sh
if [ "$1" = "-f" ]; then
  touch /dev/shm/gpushare-e2e-mps-daemon
  while [ ! -f "$CUDA_MPS_PIPE_DIRECTORY/quit" ] && kill -0 $PPID 2>/dev/null; do sleep 0.2; done
  rm -f "$CUDA_MPS_PIPE_DIRECTORY/quit" /dev/shm/gpushare-e2e-mps-daemon
  exit 0
fi
read cmd
[ "$cmd" = quit ] && touch "$CUDA_MPS_PIPE_DIRECTORY/quit"
exit 0
`

// socketDir returns a new directory for a node's sockets, removed when
// the test ends. Unix socket paths are short: it is near the root.
func socketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// gpuNodeOptions say what startGPUNode's node is like.
type gpuNodeOptions struct {
	// mps shares the GPUs under MPS.
	mps bool
	// big makes the GPUs 141 GiB, too big to count their MiB in device
	// plugin devices, with deploy/gpu-hook-policy.yaml in force.
	big bool
	// gib serves aliyun.com/gpu-mem, one device per GiB, and burst's
	// pods ask it.
	gib bool
	// hookMemory serves no device per MiB (--hook-memory), with
	// deploy/gpu-hook-policy.yaml in force.
	hookMemory bool
}

// startGPUNode starts gpushare-node for a node of 8 simulated GPUs (16 GiB
// unless big).
func startGPUNode(t testing.TB, o gpuNodeOptions) *gpuNode {
	t.Helper()
	c, client, _ := startPlugin(t, nil)
	bareNode(t, client, "gpu-0")
	dir := socketDir(t)
	kubelet := kubelettest.Start(t, dir)
	gpus := "gpus:\n- {model: Tesla T4, memoryMiB: 16384, count: 8, numaNodes: 2, nvlink: pairs}\n"
	if o.big || o.hookMemory {
		applyHookPolicy(t, client)
	}
	if o.big {
		gpus = "gpus:\n- {model: NVIDIA H200, memoryMiB: 144384, count: 8, numaNodes: 2, nvlink: all}\n"
	}
	files := map[string]string{
		"gpus.yaml": gpus,
		"args.yaml": "apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nresourceModel:\n  resources:\n" +
			"  - {name: gpushare.io/gpu-mem, kind: Memory}\n  - {name: gpushare.io/gpu-core, kind: Compute}\n",
	}
	if o.mps {
		files["args.yaml"] += "  - {name: keti.com/mpsgpu, kind: MPS}\n"
	}
	if o.gib {
		files["args.yaml"] += "  - {name: aliyun.com/gpu-mem, kind: Memory, unit: GiB}\n"
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	n := &gpuNode{client: client, kubelet: kubelet, cdiDir: filepath.Join(dir, "cdi"), podMiB: 1024, gib: o.gib,
		metricsURL: "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"}
	if n.runtime, err = runtimetest.New(n.cdiDir); err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig=" + c.Kubeconfig, "--node-name=gpu-0",
		"--simulated-gpus=" + filepath.Join(dir, "gpus.yaml"), "--config=" + filepath.Join(dir, "args.yaml"),
		"--device-plugin-dir=" + dir, "--pod-resources-socket=" + kubelet.PodResourcesSocket(), "--cdi-dir=" + n.cdiDir,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(port), "--usage-interval=0", "-v=2"}
	if o.mps {
		n.mps = &deviceplugin.MPS{PipeDir: filepath.Join(dir, "mps-pipe"), LogDir: filepath.Join(dir, "mps-log"), ShmDir: filepath.Join(dir, "mps-shm")}
		control := filepath.Join(dir, "nvidia-cuda-mps-control")
		if err := os.WriteFile(control, []byte(fakeMPSControl), 0o755); err != nil { //nolint:gosec // an executable test script
			t.Fatal(err)
		}
		args = append(args, "--mps", "--mps-control="+control, "--mps-pipe-dir="+n.mps.PipeDir,
			"--mps-log-dir="+n.mps.LogDir, "--mps-shm-dir="+n.mps.ShmDir)
	}
	if o.hookMemory {
		args = append(args, "--hook-memory")
	}
	n.daemon, err = c.Run("gpushare-node", nodeBin(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	if o.big {
		// The pods' MiB are left to the scheduler; each container holds
		// a hook.
		n.podMiB = 10_000
		kubelet.WaitAllocatable(gpusharev1.HookResource, deviceplugin.DefaultHookDevices)
		return n
	}
	if o.hookMemory {
		kubelet.WaitAllocatable(gpusharev1.HookResource, deviceplugin.DefaultHookDevices)
		return n
	}
	kubelet.WaitAllocatable("gpushare.io/gpu-mem", 8*16384)
	if o.gib {
		kubelet.WaitAllocatable("aliyun.com/gpu-mem", 8*16)
	}
	if o.mps {
		kubelet.WaitAllocatable("keti.com/mpsgpu", 8*deviceplugin.DefaultSlotsPerGPU)
	}
	return n
}

// burst creates count pods of n.podMiB named prefix-NNN, waits until the
// scheduler has bound them to gpu-0 with their records, admits them one
// by one (as the kubelet does) and starts their containers at once,
// checking that each container's environment names its recorded GPU and
// share. It returns the pods, and how long each container's start took
// through the kubelet's device manager.
func (n *gpuNode) burst(t testing.TB, prefix string, count int) ([]corev1.Pod, []time.Duration) {
	t.Helper()
	ctx := context.Background()
	for i := range count {
		pod := gpuPod(fmt.Sprintf("%s-%03d", prefix, i), n.podMiB, 0)
		if n.gib {
			pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
				"aliyun.com/gpu-mem": *k8sresource.NewQuantity(n.podMiB/1024, k8sresource.DecimalSI)}
		}
		if n.mps != nil && i%2 == 0 {
			pod = mpsPod(pod.Name, n.podMiB)
		}
		if _, err := n.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var bound []corev1.Pod
	err := waitFor(2*time.Minute, func() (bool, error) {
		list, err := n.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		bound = bound[:0]
		for _, p := range list.Items {
			if _, ok := p.Annotations[gpusharev1.AllocationAnnotation]; ok && p.Spec.NodeName == "gpu-0" && strings.HasPrefix(p.Name, prefix+"-") {
				bound = append(bound, p)
			}
		}
		return len(bound) == count, nil
	})
	if err != nil {
		t.Fatalf("%d of %d pods bound to gpu-0: %v", len(bound), count, err)
	}
	// Admission is one pod after another in the kubelet; starts are not.
	for i := range bound {
		if err := n.kubelet.Admit(&bound[i]); err != nil {
			t.Fatalf("admitting %s: %v", bound[i].Name, err)
		}
	}
	var wg sync.WaitGroup
	took := make([]time.Duration, len(bound))
	devices := make([][]string, len(bound))
	for i := range bound {
		wg.Go(func() {
			start := time.Now()
			opts, err := n.kubelet.StartContainer(&bound[i], "main")
			took[i] = time.Since(start)
			if err != nil {
				t.Errorf("starting %s: %v", bound[i].Name, err)
				return
			}
			for _, d := range opts.CDIDevices {
				devices[i] = append(devices[i], d.Name)
			}
		})
	}
	wg.Wait()
	// The runtime creates the containers, after the timed starts.
	for i := range bound {
		if devices[i] != nil {
			n.checkContainer(t, &bound[i], devices[i])
		}
	}
	return bound, took
}

// checkContainer checks what the runtime gives the container of pod with
// these CDI devices: the GPU and share of its record, and if it asks for
// MPS the daemon's directories and its own limits; no MPS otherwise.
func (n *gpuNode) checkContainer(t testing.TB, pod *corev1.Pod, devices []string) {
	t.Helper()
	want := record(t, pod).Containers[0].GPUs[0]
	c, err := n.runtime.Create(devices)
	if err != nil {
		t.Errorf("%s: %v", pod.Name, err)
		return
	}
	env := c.Env
	if env["NVIDIA_VISIBLE_DEVICES"] != want.UUID || env["GPUSHARE_GPU_MEMORY_MIB"] != strconv.FormatInt(want.MemoryMiB, 10) {
		t.Errorf("pod %s was recorded on GPU %d (%s, %d MiB); its container sees %q with %s MiB",
			pod.Name, want.Index, want.UUID, want.MemoryMiB, env["NVIDIA_VISIBLE_DEVICES"], env["GPUSHARE_GPU_MEMORY_MIB"])
	}
	if n.mps == nil {
		return
	}
	if _, asks := pod.Spec.Containers[0].Resources.Limits["keti.com/mpsgpu"]; !asks {
		if _, ok := env["CUDA_MPS_PIPE_DIRECTORY"]; ok || c.Mounts[n.mps.PipeDir] != "" || c.Mounts["/dev/shm"] == n.mps.ShmDir {
			t.Errorf("pod %s asks no MPS but is an MPS client: environment %v, mounts %v", pod.Name, env, c.Mounts)
		}
		return
	}
	if want.Compute != 10 || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "10" {
		t.Errorf("MPS pod %s: %d%% booked, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q; want the default 10", pod.Name, want.Compute, env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
	}
	if env["CUDA_MPS_PIPE_DIRECTORY"] != n.mps.PipeDir || env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != fmt.Sprintf("0=%dM", want.MemoryMiB) ||
		c.Mounts[n.mps.PipeDir] != n.mps.PipeDir || c.Mounts["/dev/shm"] != n.mps.ShmDir {
		t.Errorf("pod %s under MPS: environment %v, mounts %v; want the pipe directory %s, its own %d MiB limit and %s at /dev/shm",
			pod.Name, env, c.Mounts, n.mps.PipeDir, want.MemoryMiB, n.mps.ShmDir)
	}
}

// clear deletes every pod in default, waits until they are gone, and
// takes them off the kubelet's active pods, so that their devices and
// GPU shares are free again.
func (n *gpuNode) clear(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	if err := n.client.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err := waitFor(time.Minute, func() (bool, error) {
		list, err := n.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, err
	})
	if err != nil {
		t.Fatalf("deleting the pods: %v", err)
	}
	n.kubelet.Clear()
}

// histogram is one series of a Prometheus histogram: cumulative counts
// by upper bound.
type histogram struct {
	count  uint64
	bounds []float64
	counts []uint64
}

// calls reads gpushare-node's call latency histogram, by method.
func (n *gpuNode) calls(t testing.TB) map[string]histogram {
	t.Helper()
	out := map[string]histogram{}
	f, ok := scrape(t, n.metricsURL)["gpushare_node_device_plugin_call_duration_seconds"]
	if !ok {
		return out
	}
	for _, m := range f.GetMetric() {
		var method string
		for _, l := range m.GetLabel() {
			if l.GetName() == "method" {
				method = l.GetValue()
			}
		}
		h := histogram{count: m.GetHistogram().GetSampleCount()}
		for _, b := range m.GetHistogram().GetBucket() {
			h.bounds = append(h.bounds, b.GetUpperBound())
			h.counts = append(h.counts, b.GetCumulativeCount())
		}
		out[method] = h
	}
	return out
}

// sub returns the observations of h made since before.
func (h histogram) sub(before histogram) histogram {
	out := histogram{count: h.count - before.count, bounds: h.bounds, counts: slices.Clone(h.counts)}
	for i := range out.counts {
		if i < len(before.counts) {
			out.counts[i] -= before.counts[i]
		}
	}
	return out
}

// buckets renders the cumulative counts by upper bound.
func (h histogram) buckets() string {
	parts := make([]string, len(h.bounds))
	for i := range h.bounds {
		parts[i] = fmt.Sprintf("%g: %d", h.bounds[i], h.counts[i])
	}
	return strings.Join(parts, ", ")
}

// quantile returns the upper bound of the bucket that holds quantile q,
// +Inf past the last bucket, 0 without observations.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.count)))
	for i, c := range h.counts {
		if c >= rank {
			return h.bounds[i]
		}
	}
	return math.Inf(1)
}

// residentMiB reads a process's resident memory.
func residentMiB(pid int) (float64, error) { return statusMiB(pid, "VmRSS") }

// peakResidentMiB is the most memory the process has held resident, in
// MiB.
func peakResidentMiB(pid int) (float64, error) { return statusMiB(pid, "VmHWM") }

func statusMiB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kib / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s for process %d", field, pid)
}

// TestInventoryAfterRegistration: gpushare-node publishes its node's GPUs
// only once its device plugins have registered with the kubelet. A pod
// admitted before would hold none of the devices through which its
// containers get their GPUs (the kubelet leaves out resources the node
// does not advertise).
func TestInventoryAfterRegistration(t *testing.T) {
	t.Parallel()
	c, client, _ := startPlugin(t, nil)
	bareNode(t, client, "gpu-0")
	dir := socketDir(t)
	gpus := filepath.Join(dir, "gpus.yaml")
	if err := os.WriteFile(gpus, []byte("gpus:\n- {model: Tesla T4, memoryMiB: 16384, count: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run("gpushare-node", nodeBin(t), "--kubeconfig="+c.Kubeconfig, "--node-name=gpu-0", "--simulated-gpus="+gpus,
		"--device-plugin-dir="+dir, "--pod-resources-socket="+filepath.Join(dir, "pod-resources", "kubelet.sock"),
		"--cdi-dir="+filepath.Join(dir, "cdi"), "--metrics-bind-address=", "--usage-interval=0"); err != nil {
		t.Fatal(err)
	}
	published := func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(context.Background(), "gpu-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := n.Annotations[gpusharev1.InventoryAnnotation]
		return ok, nil
	}
	// No kubelet yet: nothing is published.
	time.Sleep(3 * time.Second)
	if ok, err := published(); err != nil || ok {
		t.Fatalf("the inventory was published before any plugin registered (%v)", err)
	}
	kubelet := kubelettest.Start(t, dir)
	if err := waitFor(time.Minute, published); err != nil {
		t.Fatalf("the inventory was not published after the plugins registered: %v", err)
	}
	// Registered, the kubelet counts a plugin's devices once its first
	// ListAndWatch answer arrives.
	for _, r := range []string{gpusharev1.HookResource, "gpushare.io/gpu-mem"} {
		if err := waitFor(30*time.Second, func() (bool, error) { return kubelet.Allocatable(r) > 0, nil }); err != nil {
			t.Errorf("published with %s not registered", r)
		}
	}
}
