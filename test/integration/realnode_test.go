package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
	recordpkg "github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

// imageTag is the tag of the images the real-node tests build.
const imageTag = "e2e"

// realNodeEventWait is how long a real-node test waits for the scheduler's
// event on a pod: the in-cluster gpushare-scheduler, on a busy 2-core
// machine, may lose its lease or fail its probes and restart first.
const realNodeEventWait = 3 * time.Minute

// probeImage is the real node's pod sandbox and, through the mirror, every
// image a seed example names.
const probeImage = "ghcr.io/gpushare/gpushare-probe:" + imageTag

var testImages struct {
	once sync.Once
	dir  string
	err  error
}

// images builds gpushare-scheduler, gpushare-node and the test workload
// gpushare-probe as `make images` does (hack/image), once per run, and
// returns the directory of their OCI layouts.
func images(t *testing.T) string {
	t.Helper()
	testImages.once.Do(func() {
		testImages.dir = filepath.Join(binDir, "images")
		cmd := exec.Command("go", "-C", "hack/image", "run", ".", "--out", testImages.dir,
			"--images=gpushare-scheduler,gpushare-node,gpushare-probe", "--version="+imageTag)
		var out bytes.Buffer
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, &out, &out
		if err := cmd.Run(); err != nil {
			testImages.err = fmt.Errorf("building the images: %w\n%s", err, out.String())
		}
	})
	if testImages.err != nil {
		t.Fatal(testImages.err)
	}
	return testImages.dir
}

// realCluster is a control plane with one real node (kubelet, containerd,
// runc) and gpushare installed from its chart and images: the scheduler
// and the node daemon run as the chart's pods there.
type realCluster struct {
	c      *controlplane.Cluster
	client kubernetes.Interface
	node   *controlplane.RealNode
}

// realNodeGPUs are the real node's simulated GPUs.
// Four 32 GiB GPUs hold the seed examples that fit one node (all but
// the H200 and MPS ones), and stay within what the device-per-MiB route
// serves.
const realNodeGPUs = "gpus:\n- {model: Tesla V100-SXM2-32GB, memoryMiB: 32768, count: 4}\n"

// needRealNode skips the test without root or the real node's binaries,
// saying why, unless the run requires the cluster (make node-test, CI):
// then it fails.
func needRealNode(t *testing.T) {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
	if err := tools.RealNodeTools(); err != nil || os.Geteuid() != 0 {
		why := "the real node needs root"
		if err != nil {
			why = err.Error()
		}
		if os.Getenv("GPUSHARE_REQUIRE_CLUSTER") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
}

func startRealCluster(t *testing.T, values ...string) *realCluster {
	t.Helper()
	return startReal(t, false, values...)
}

// startReal is startRealCluster, with the chart's node.mps when mps is
// set: the machine has no NVIDIA driver, so gpushare-node then supervises
// gpushare-probe's stand-in for nvidia-cuda-mps-control (test/gpushare-probe/mps.go).
func startReal(t *testing.T, mps bool, values ...string) *realCluster {
	t.Helper()
	needRealNode(t)
	if mps {
		// The chart's MPS host paths are NVIDIA's defaults: a machine that
		// runs MPS has them, and they are not the test's to remove. Those
		// the test makes go after the cluster stops (this cleanup runs
		// after the cluster's).
		mpsDirs := []string{mpsPipeDir, "/var/log/nvidia-mps", "/run/gpushare/mps-shm"}
		for _, d := range mpsDirs {
			if _, err := os.Stat(d); err == nil {
				t.Fatalf("%s exists: this machine may run MPS; the MPS test uses the chart's default host paths and would share them", d)
			}
		}
		t.Cleanup(func() {
			for _, d := range mpsDirs {
				_ = os.RemoveAll(d)
			}
			_ = os.Remove("/run/gpushare") // if nothing else is there
		})
	}
	dir := images(t)
	ctx := context.Background()
	c, err := controlplane.Start(ctx, controlplane.Options{Tools: tools, NoKwok: true})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	rc := &realCluster{c: c}
	t.Cleanup(func() {
		if t.Failed() {
			rc.keepLogs(t)
		}
		c.Stop()
	})
	if rc.client, err = c.Client(); err != nil {
		t.Fatal(err)
	}
	mirror, err := controlplane.ServeImage(filepath.Join(dir, "gpushare-probe"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mirror.Close() })
	rc.node, err = c.StartRealNode(ctx, controlplane.RealNodeOptions{
		Name: "gpu-real",
		Images: map[string]string{
			"ghcr.io/gpushare/gpushare-scheduler": filepath.Join(dir, "gpushare-scheduler"),
			"ghcr.io/gpushare/gpushare-node":      filepath.Join(dir, "gpushare-node"),
			"ghcr.io/gpushare/gpushare-probe":     filepath.Join(dir, "gpushare-probe"),
		},
		SandboxImage: probeImage,
		Mirror:       mirror.Host,
		Labels:       map[string]string{"gpushare": "true"},
		// In a mount namespace of its own, with its own bridge: the
		// tests run beside make demo's real node and never touch it.
		Private: true,
	})
	if err != nil {
		t.Fatalf("starting the real node: %v", err)
	}
	sim := filepath.Join(c.Dir, "nodes", "gpu-real", "sim")
	if err := os.MkdirAll(sim, 0o755); err != nil {
		t.Fatal(err)
	}
	// Stand-in device nodes, which the CDI specs hand the containers.
	if err := controlplane.StandInDevices(filepath.Join(sim, "dev"), 4); err != nil {
		t.Fatal(err)
	}
	gpus := realNodeGPUs + "deviceDir: " + filepath.Join(sim, "dev") + "\n"
	if err := os.WriteFile(filepath.Join(sim, "gpus.yaml"), []byte(gpus), 0o644); err != nil {
		t.Fatal(err)
	}
	nodeArgs := `["--simulated-gpus=/etc/gpushare-sim/gpus.yaml"]`
	if mps {
		build := exec.Command("go", "build", "-o", filepath.Join(sim, "nvidia-cuda-mps-control"), "./test/gpushare-probe")
		build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building the MPS control stand-in: %v\n%s", err, out)
		}
		nodeArgs = `["--simulated-gpus=/etc/gpushare-sim/gpus.yaml","--mps-control=/etc/gpushare-sim/nvidia-cuda-mps-control"]`
		values = append(values, "--set", "node.mps=true")
	}
	stock, err := c.StartScheduler(ctx, "kube-scheduler", tools.Bin("kube-scheduler"), []byte(stockSchedulerConfig))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"install", "gpushare", chart, "--kubeconfig", c.Kubeconfig,
		"--namespace", chartNamespace, "--create-namespace", "--wait", "--timeout", "4m",
		"--set", "image.tag=" + imageTag, "--set", "scheduler.replicas=1", "--set", "scheduler.replaceDefault=true",
		"--set", "node.cdiDir=" + rc.node.CDIDir,
		"--set-json", "node.extraArgs=" + nodeArgs,
		"--set-json", `node.extraVolumes=[{"name":"sim","hostPath":{"path":"` + sim + `","type":"Directory"}}]`,
		"--set-json", `node.extraVolumeMounts=[{"name":"sim","mountPath":"/etc/gpushare-sim","readOnly":true}]`,
	}, seedValues...)
	helm(t, append(args, values...)...)
	// The operator removes kube-scheduler's static pod: gpushare-scheduler,
	// a pod on the real node, serves default-scheduler from now on.
	stock.Stop(10 * time.Second)
	err = waitFor(2*time.Minute, func() (bool, error) {
		n, err := rc.client.CoreV1().Nodes().Get(ctx, "gpu-real", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := n.Annotations[gpusharev1.InventoryAnnotation]
		return ok, nil
	})
	if err != nil {
		t.Fatalf("gpushare-node did not publish the real node's GPUs: %v", err)
	}
	return rc
}

// exec runs command in a container of a pod, as kubectl exec does, and
// returns its standard output. A kubelet just restarted refuses exec
// ("pod does not exist") until it has read its pods from the apiserver:
// exec tries for half a minute.
func (rc *realCluster) exec(t *testing.T, ns, pod, container string, command ...string) []byte {
	t.Helper()
	args := append([]string{"--kubeconfig=" + rc.c.Kubeconfig, "exec", "-n", ns, pod, "-c", container, "--"}, command...)
	var stdout, stderr bytes.Buffer
	deadline := time.Now().Add(30 * time.Second)
	for {
		stdout.Reset()
		stderr.Reset()
		cmd := exec.Command(tools.Bin("kubectl"), args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil {
			return stdout.Bytes()
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl exec %s/%s -c %s %v: %v: %s", ns, pod, container, command, err, stderr.String())
		}
		time.Sleep(time.Second)
	}
}

// probeReport is what gpushare-probe report prints.
type probeReport struct {
	Env     map[string]string   `json:"env"`
	Devices []string            `json:"devices"`
	Paths   map[string][]string `json:"paths"`
}

func (rc *realCluster) report(t *testing.T, ns, pod, container string, paths ...string) probeReport {
	t.Helper()
	out := rc.exec(t, ns, pod, container, append([]string{"gpushare-probe", "report"}, paths...)...)
	var r probeReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s/%s: %v: %s", ns, pod, err, out)
	}
	return r
}

// realSeeds are the seed examples the real node runs: every one but the
// H200's (another GPU model) and KETI's (MPS).
var realSeeds = []string{
	"examples/001-aliyun-binpack.yaml",
	"examples/003-aliyun-mib.yaml",
	"examples/004-elastic.yaml",
	"examples/multi-container.yaml",
}

// TestRealNodeSeeds: the seed examples, unchanged, on a real node with
// gpushare from its chart and images, by either route to the GPU memory
// (the hooks, and one device per MiB): each container, asked from inside
// (kubectl exec), sees exactly the GPUs of its pod's record with its
// share, Aliyun's variables where it asks aliyun.com/gpu-mem, and a
// container that asks for no GPU sees nothing of them.
func TestRealNodeSeeds(t *testing.T) {
	for _, route := range []struct{ name, hooks string }{{"hooks", "true"}, {"device per MiB", "false"}} {
		t.Run(route.name, func(t *testing.T) {
			rc := startRealCluster(t, "--set", "hookPolicy.enabled="+route.hooks)
			ctx := context.Background()
			// A pod with no GPU through the GPU scheduler first.
			plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "no-gpu", Namespace: "default"},
				Spec: corev1.PodSpec{SchedulerName: "gpu-scheduler",
					Containers: []corev1.Container{{Name: "main", Image: "busybox", Command: []string{"sleep", "infinity"}}}}}
			if _, err := rc.client.CoreV1().Pods("default").Create(ctx, plain, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, m := range realSeeds {
				if err := controlplane.Apply(ctx, rc.client, readFile(t, m)); err != nil {
					t.Fatalf("%s: %v", m, err)
				}
			}
			pods := rc.runningPods(t, 1+3+3+2+1)
			for i := range pods {
				rc.checkContainers(t, &pods[i])
			}
		})
	}
}

// mpsPipeDir is the chart's MPS pipe directory, the KETI system's.
const mpsPipeDir = "/tmp/nvidia-mps"

// TestRealNodeMPS: MPS pods on a real node whose gpushare-node runs with
// the chart's node.mps, supervising a stand-in MPS control daemon (no
// NVIDIA driver here). Seed 000 (KETI's nbody Job, unchanged: hostIPC and
// its own mount of the pipe directory) and a pod with its own memory and
// compute limits each see, from inside: their GPUs as checkContainers
// checks them; the pipe directory named and mounted, holding the
// daemon's control file; the daemon's shared memory at /dev/shm (its
// marker there); and the MPS limits sized from their own requests.
func TestRealNodeMPS(t *testing.T) {
	rc := startReal(t, true)
	ctx := context.Background()
	if err := controlplane.Apply(ctx, rc.client, readFile(t, "examples/000-keti-nbody.yaml")); err != nil {
		t.Fatal(err)
	}
	limited := mpsPod("mps-limited", 8192)
	limited.Annotations["gpushare.io/mps-compute"] = "25"
	limited.Spec.Containers[0].Command = []string{"sleep", "infinity"}
	if _, err := rc.client.CoreV1().Pods("default").Create(ctx, limited, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := rc.runningPods(t, 2)
	for i := range pods {
		p := &pods[i]
		rc.checkContainers(t, p)
		a := record(t, p)
		c := p.Spec.Containers[0]
		var ca *gpusharev1.ContainerAllocation
		for j := range a.Containers {
			if a.Containers[j].Name == c.Name {
				ca = &a.Containers[j]
			}
		}
		if ca == nil || len(ca.GPUs) != 1 {
			t.Errorf("%s/%s: record %s; want one GPU for container %s", p.Namespace, p.Name, describeAllocation(a), c.Name)
			continue
		}
		got := rc.report(t, p.Namespace, p.Name, c.Name, mpsPipeDir, "/dev/shm")
		what := p.Namespace + "/" + p.Name
		// The limits are the record's share: no memory limit where it
		// books none (seed 000 sets no GPUlimits), the thread share
		// where it is under 100%.
		g := ca.GPUs[0]
		want := map[string]string{"CUDA_MPS_PIPE_DIRECTORY": mpsPipeDir,
			"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": ""}
		if g.MemoryMiB > 0 {
			want["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = fmt.Sprintf("0=%dM", g.MemoryMiB)
		}
		if g.Compute > 0 && g.Compute < 100 {
			want["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.FormatInt(g.Compute, 10)
		}
		switch {
		case p.Name == limited.Name && (g.MemoryMiB != 8192 || g.Compute != 25):
			t.Errorf("%s: record gives %d MiB and %d%%; want its GPUlimits' 8192 MiB and mps-compute's 25%%", what, g.MemoryMiB, g.Compute)
		case p.Name != limited.Name && (g.MemoryMiB != 0 || g.Compute != 10):
			t.Errorf("%s: record gives %d MiB and %d%%; want seed 000's: no memory (no GPUlimits) and the default 10%%", what, g.MemoryMiB, g.Compute)
		}
		for k, v := range want {
			if got.Env[k] != v {
				t.Errorf("%s: %s=%q; want %q", what, k, got.Env[k], v)
			}
		}
		if !slices.Contains(got.Paths[mpsPipeDir], "control") {
			t.Errorf("%s: %s holds %v; want the MPS control daemon's control file", what, mpsPipeDir, got.Paths[mpsPipeDir])
		}
		if !slices.ContainsFunc(got.Paths["/dev/shm"], func(e string) bool { return strings.HasPrefix(e, "gpushare-mps-standin-") }) {
			t.Errorf("%s: /dev/shm holds %v; want the MPS daemon's (its marker)", what, got.Paths["/dev/shm"])
		}
		t.Logf("%s sees %s, pipe %v, shm %v", what, got.Env, got.Paths[mpsPipeDir], got.Paths["/dev/shm"])
	}
}

// runningPods waits until n pods outside the chart's namespace run, all
// of them, and returns them.
func (rc *realCluster) runningPods(t *testing.T, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := waitFor(3*time.Minute, func() (bool, error) {
		list, err := rc.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.Namespace != chartNamespace && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		return len(pods) == n, nil
	})
	if err != nil {
		var states []string
		list, _ := rc.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
		for i := range list.Items {
			states = append(states, rc.describe(&list.Items[i]))
		}
		t.Fatalf("%d of %d pods running: %v; pods: %v", len(pods), n, err, states)
	}
	return pods
}

// logDir makes a directory for a failed test's logs: under
// $GPUSHARE_TEST_LOGS if set, else a new temporary one; "" if it cannot.
func logDir(t *testing.T) string {
	name := strings.ReplaceAll(t.Name(), "/", "_")
	dir := os.Getenv("GPUSHARE_TEST_LOGS")
	var err error
	if dir != "" {
		dir = filepath.Join(dir, name)
		err = os.MkdirAll(dir, 0o755)
	} else {
		dir, err = os.MkdirTemp("", "gpushare-"+name+"-")
	}
	if err != nil {
		t.Logf("keeping the logs: %v", err)
		return ""
	}
	return dir
}

// keepLogs saves a failed test's evidence, every process's log and the
// state of every pod, in a directory it names in one line
// ($GPUSHARE_TEST_LOGS, or a new temporary one): printed inline, the
// logs would bury the failure itself.
func (rc *realCluster) keepLogs(t *testing.T) {
	dir := logDir(t)
	if dir == "" {
		return
	}
	for _, p := range rc.c.Processes() {
		if b, err := os.ReadFile(p.Log); err == nil {
			_ = os.WriteFile(filepath.Join(dir, p.Name+".log"), b, 0o644)
		}
	}
	// The containers' own logs: the chart's scheduler and node daemon.
	if err := os.CopyFS(filepath.Join(dir, "pod-logs"), os.DirFS(filepath.Join(rc.c.Dir, "nodes", "gpu-real", "pod-logs"))); err != nil {
		t.Logf("keeping the pods' logs: %v", err)
	}
	var pods strings.Builder
	if list, err := rc.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&pods, "listing pods: %v\n", err)
	} else {
		for i := range list.Items {
			p := &list.Items[i]
			restarts := int32(0)
			for _, cs := range p.Status.ContainerStatuses {
				restarts += cs.RestartCount
			}
			fmt.Fprintf(&pods, "%s restarts=%d\n", rc.describe(p), restarts)
		}
	}
	_ = os.WriteFile(filepath.Join(dir, "pods.txt"), []byte(pods.String()), 0o644)
	t.Logf("logs and pod states kept in %s", dir)
}

// describe says where a pod is, why its containers wait, and its events.
func (rc *realCluster) describe(p *corev1.Pod) string {
	state := fmt.Sprintf("%s/%s %s %s", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName)
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			state += fmt.Sprintf(" %s: %s %s", cs.Name, w.Reason, w.Message)
		}
	}
	events, _ := rc.client.CoreV1().Events(p.Namespace).List(context.Background(),
		metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	for _, e := range events.Items {
		state += " [" + e.Reason + ": " + e.Message + "]"
	}
	return state
}

// checkContainers asks each container of a running pod what it sees and
// holds it to the pod's record.
func (rc *realCluster) checkContainers(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	var a *gpusharev1.Allocation
	if asksForGPU(pod) {
		a = record(t, pod)
	}
	for _, c := range pod.Spec.Containers {
		got := rc.report(t, pod.Namespace, pod.Name, c.Name)
		var ca *gpusharev1.ContainerAllocation
		if a != nil {
			for i := range a.Containers {
				if a.Containers[i].Name == c.Name {
					ca = &a.Containers[i]
				}
			}
		}
		what := pod.Namespace + "/" + pod.Name + " " + c.Name
		if ca == nil || len(ca.GPUs) == 0 {
			if len(got.Env) != 0 || len(got.Devices) != 0 {
				t.Errorf("%s asks for no GPU; it sees %v %v", what, got.Env, got.Devices)
			}
			continue
		}
		var uuids, mib []string
		for _, g := range ca.GPUs {
			uuids = append(uuids, g.UUID)
			mib = append(mib, strconv.FormatInt(g.MemoryMiB, 10))
		}
		want := map[string]string{
			"NVIDIA_VISIBLE_DEVICES":  strings.Join(uuids, ","),
			"GPUSHARE_GPU_MEMORY_MIB": strings.Join(mib, ","),
		}
		if resource.ContainerAsks(&c, recordpkg.AliyunMemory) {
			var idx []string
			for _, g := range ca.GPUs {
				idx = append(idx, strconv.Itoa(g.Index))
			}
			want[recordpkg.AliyunIndex] = strings.Join(idx, ",")
			want[recordpkg.AliyunPod] = pod.Annotations[recordpkg.AliyunPod]
		}
		for k, v := range want {
			if got.Env[k] != v {
				t.Errorf("%s (record: %s): %s=%q; want %q", what, describeAllocation(a), k, got.Env[k], v)
			}
		}
		// The device nodes of its GPUs (the simulation's stand-ins,
		// /dev/null's numbers), and no other GPU's.
		var devices []string
		for _, g := range ca.GPUs {
			devices = append(devices, fmt.Sprintf("nvidia%d 1:3", g.Index))
		}
		slices.Sort(devices)
		if !slices.Equal(got.Devices, devices) {
			t.Errorf("%s (record: %s): device nodes %v; want %v", what, describeAllocation(a), got.Devices, devices)
		}
		t.Logf("%s sees %s", what, got.Env["NVIDIA_VISIBLE_DEVICES"])
	}
}

// TestRealNodeLifecycle: on the real node, running containers keep their
// GPUs through a kubelet restart, a containerd restart and a rolling
// update of the node DaemonSet, and pods started after each get theirs
// (the plugins re-registered, the new daemon serves); a crash-looping
// container gets the same GPU at every start; deleting a pod frees its
// GPU for the pod waiting for it.
func TestRealNodeLifecycle(t *testing.T) {
	rc := startRealCluster(t)
	ctx := context.Background()
	gatewayKeepsAddress(t, rc.node.Bridge())
	start := func(name string, mib int64, command ...string) *corev1.Pod {
		t.Helper()
		pod := gpuPod(name, mib, 0)
		pod.Spec.Containers[0].Command = command
		if _, err := rc.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return pod
	}
	// running waits for a pod to run, three minutes: on two busy cores a
	// kubelet just restarted, or the scheduler's pod restarted by its
	// probes, take their time.
	running := func(name string) *corev1.Pod {
		t.Helper()
		var p *corev1.Pod
		err := waitFor(3*time.Minute, func() (bool, error) {
			var err error
			if p, err = rc.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
				return false, nil
			}
			return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready, nil
		})
		if err != nil {
			t.Fatalf("pod %s not running: %v; %s", name, err, rc.describe(p))
		}
		rc.checkContainers(t, p)
		return p
	}
	// keep runs throughout; it must be the same container at the end.
	start("keep", 32768, "sleep", "infinity")
	keep := running("keep")
	still := func(when string) {
		t.Helper()
		p, err := rc.client.CoreV1().Pods("default").Get(ctx, "keep", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		was, now := keep.Status.ContainerStatuses[0], p.Status.ContainerStatuses[0]
		if now.ContainerID != was.ContainerID || now.RestartCount != 0 || now.State.Running == nil {
			t.Errorf("%s: keep's container %s (restarts %d, running %v); want %s still running", when, now.ContainerID, now.RestartCount, now.State.Running != nil, was.ContainerID)
		}
		rc.checkContainers(t, p)
	}

	if err := rc.node.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	still("after a kubelet restart")
	start("after-kubelet", 32768, "sleep", "infinity")
	running("after-kubelet")

	if err := rc.node.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	still("after a containerd restart")
	start("after-containerd", 32768, "sleep", "infinity")
	running("after-containerd")

	// A rolling update of the node daemon (kubectl rollout restart).
	old := map[string]bool{}
	daemons := func() []corev1.Pod {
		list, err := rc.client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
		if err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	for _, p := range daemons() {
		old[p.Name] = true
	}
	if out, err := exec.Command(tools.Bin("kubectl"), "--kubeconfig="+rc.c.Kubeconfig, "-n", chartNamespace,
		"rollout", "restart", "daemonset/gpushare-node").CombinedOutput(); err != nil {
		t.Fatalf("kubectl rollout restart: %v: %s", err, out)
	}
	err := waitFor(2*time.Minute, func() (bool, error) {
		pods := daemons()
		for _, p := range pods {
			if old[p.Name] || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 || !p.Status.ContainerStatuses[0].Ready {
				return false, nil
			}
		}
		return len(pods) == 1, nil
	})
	if err != nil {
		t.Fatalf("the node daemon's rolling update did not finish: %v", err)
	}
	still("after the node daemon's rolling update")
	start("after-rollout", 16384, "sleep", "infinity")
	running("after-rollout")

	// A container that exits at once, restarted by the kubelet: each
	// start prints the GPUs it was given.
	start("crash", 16384, "gpushare-probe", "crash")
	var crash *corev1.Pod
	err = waitFor(3*time.Minute, func() (bool, error) {
		var err error
		if crash, err = rc.client.CoreV1().Pods("default").Get(ctx, "crash", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		return len(crash.Status.ContainerStatuses) == 1 && crash.Status.ContainerStatuses[0].RestartCount >= 2, nil
	})
	if err != nil {
		t.Fatalf("the crashing container was not restarted twice: %v; %s", err, rc.describe(crash))
	}
	want := strings.Join(gpuUUIDs(record(t, crash)), ",")
	for _, previous := range []bool{true, false} {
		err := waitFor(time.Minute, func() (bool, error) {
			b, err := rc.client.CoreV1().Pods("default").GetLogs("crash", &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
			if err != nil {
				return false, nil
			}
			got := strings.TrimSpace(string(b))
			if strings.HasPrefix(got, "unable to retrieve container logs for ") {
				// The kubelet's answer, not the container's output: the
				// log of a container it just replaced is gone; the next
				// one's will be there.
				return false, nil
			}
			if got != "" && got != want {
				return false, fmt.Errorf("the crash-looping container saw %q at a start (previous %v); its record names %q", got, previous, want)
			}
			return got == want, nil
		})
		if err != nil {
			t.Error(err)
		}
	}

	// Every GPU is full: a pod asking a whole one waits, and gets keep's
	// once keep is deleted.
	start("waiting", 32768, "sleep", "infinity")
	eventNoteWithin(t, realNodeEventWait, rc.client, "default", "waiting", "FailedScheduling", "InsufficientGPUMemory")
	keepGPU := record(t, keep).Containers[0].GPUs[0].UUID
	if err := rc.client.CoreV1().Pods("default").Delete(ctx, "keep", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waiting := running("waiting")
	if got := record(t, waiting).Containers[0].GPUs[0].UUID; got != keepGPU {
		t.Errorf("the waiting pod got %s; want keep's freed GPU %s", got, keepGPU)
	}
}

// gatewayKeepsAddress: the pods' gateway keeps its hardware address as
// pods come and go. A bridge left to take the lowest address of its
// ports changes it when that pod goes, and every other pod's
// connections through the gateway (to the apiserver, the kubernetes
// Service) stall until its ARP entry expires: a device plugin call that
// reads the pod timed out, and the pod started 40 s late. Played with a
// port whose address is lower than any pod's, joining and leaving.
func gatewayKeepsAddress(t *testing.T, bridge string) {
	t.Helper()
	address := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("/sys/class/net", bridge, "address"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	const port = "gpushare-t0"
	_ = exec.Command("ip", "link", "del", port).Run() // a killed run's
	before := address()
	ip("link", "add", port, "address", "00:00:00:00:00:01", "type", "veth", "peer", "name", port+"p")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", port).Run() })
	ip("link", "set", port, "master", bridge)
	ip("link", "set", port, "up")
	joined := address()
	ip("link", "del", port)
	if after := address(); joined != before || after != before {
		t.Errorf("the pods' gateway %s changed its address as a port came and went: %s, %s with it, %s after", bridge, before, joined, after)
	}
}

// gpuUUIDs are the GPUs of an allocation's first container.
func gpuUUIDs(a *gpusharev1.Allocation) []string {
	var uuids []string
	for _, g := range a.Containers[0].GPUs {
		uuids = append(uuids, g.UUID)
	}
	return uuids
}
