package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

var seedNodes = []controlplane.NodeSpec{
	{Name: "a100-0", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: 4},
	{Name: "t4-0", Model: "Tesla T4", MemoryMiB: 15360, Count: 2, MPS: true},
	{Name: "h100-whole-0", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Count: 2, WholeCard: true},
	{Name: "h200-0", Model: "NVIDIA H200", MemoryMiB: 143771, Count: 8},
}

// The other seeds' manifests; 001 is applied first, alone.
var seedManifests = []string{
	"examples/000-keti-nbody.yaml",
	"examples/003-aliyun-mib.yaml",
	"examples/004-elastic.yaml",
	"examples/h200-mib.yaml",
	"examples/multi-container.yaml",
}

// TestSeedsPlugin: every seed example schedules as its seed says, through
// gpushare-scheduler with deploy/scheduler-config.yaml.
func TestSeedsPlugin(t *testing.T) {
	t.Parallel()
	_, client, s := startPlugin(t, nil)
	_, bookedMiB := checkSeeds(t, client)

	// The scheduler's metrics agree with the pod records: one scheduled
	// decision per pod recorded (the KETI Job's pod may have completed
	// since), and the memory the running pods book.
	families := scrape(t, s.URL+"/metrics")
	recorded := len(recordedPods(t, client))
	if n, err := metricSum(families, "gpushare_scheduler_decisions_total", map[string]string{"result": "scheduled"}); err != nil || int(n) != recorded {
		t.Errorf("gpushare_scheduler_decisions_total{result=scheduled} = %v (%v); %d pods have records", n, err, recorded)
	}
	if b, err := metricSum(families, "gpushare_gpu_memory_booked_bytes", nil); err != nil || int64(b) != bookedMiB<<20 {
		t.Errorf("gpushare_gpu_memory_booked_bytes sums to %v (%v); the records book %d MiB", b, err, bookedMiB)
	}
	if _, err := metricSum(families, "gpushare_scheduler_decision_duration_seconds", nil); err != nil {
		t.Error(err)
	}
}

// checkSeeds applies the seed examples, checks where they landed and
// returns how many pods hold GPUs and how much GPU memory they book.
func checkSeeds(t *testing.T, client kubernetes.Interface) (booked int, bookedMiB int64) {
	t.Helper()
	createNodes(t, client, seedNodes...)
	return checkSeedPods(t, client)
}

// checkSeedPods is checkSeeds on seedNodes that exist already.
func checkSeedPods(t *testing.T, client kubernetes.Interface) (booked int, bookedMiB int64) {
	t.Helper()
	ctx := context.Background()
	// Seed 001 first, alone, as in its seed: the three replicas of 3 GiB
	// share one GPU under binpack.
	if err := controlplane.Apply(ctx, client, readFile(t, "examples/001-aliyun-binpack.yaml")); err != nil {
		t.Fatal(err)
	}
	binpack := boundPods(t, client, "default", "app=binpack-1", 3)
	for _, m := range seedManifests {
		if err := controlplane.Apply(ctx, client, readFile(t, m)); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}

	first := record(t, &binpack[0])
	for i := range binpack {
		a := record(t, &binpack[i])
		g := a.Containers[0].GPUs
		if len(g) != 1 || g[0].MemoryMiB != 3072 || a.Node != first.Node || g[0].Index != first.Containers[0].GPUs[0].Index {
			t.Errorf("binpack-1 pod %s: %s on %s; want 3072 MiB on the GPU of the others", binpack[i].Name, describeAllocation(a), a.Node)
		}
		// Aliyun's annotations, for its tools, say the same in GiB.
		if an := binpack[i].Annotations; len(g) == 1 && (an["ALIYUN_COM_GPU_MEM_IDX"] != strconv.Itoa(g[0].Index) || an["ALIYUN_COM_GPU_MEM_POD"] != "3") {
			t.Errorf("binpack-1 pod %s: Aliyun's annotations %v; want GPU %d and 3 (GiB)", binpack[i].Name, an, g[0].Index)
		}
	}

	// Seed 003: 3500 MiB each, in the namespace that counts MiB.
	for _, p := range boundPods(t, client, "team-mib", "app=gpu-test", 3) {
		if a := record(t, &p); a.Containers[0].GPUs[0].MemoryMiB != 3500 {
			t.Errorf("gpu-test-mem pod %s: %s; want 3500 MiB", p.Name, describeAllocation(a))
		}
		if got := p.Annotations["ALIYUN_COM_GPU_MEM_POD"]; got != "3500" {
			t.Errorf("gpu-test-mem pod %s: ALIYUN_COM_GPU_MEM_POD=%q, want 3500 (MiB)", p.Name, got)
		}
	}

	// Seed 004: 256 MiB of one GPU; gpu-core 200 is two whole GPUs.
	shared := boundPods(t, client, "default", "app=gpu-test", 1)[0]
	if a := record(t, &shared); len(a.Containers[0].GPUs) != 1 || a.Containers[0].GPUs[0].MemoryMiB != 256 {
		t.Errorf("cuda-gpu-test: %s; want 256 MiB of one GPU", describeAllocation(a))
	}
	two := boundPods(t, client, "default", "app=gpu-test-2", 1)[0]
	a := record(t, &two)
	g := a.Containers[0].GPUs
	if len(g) != 2 || g[0].Index == g[1].Index || g[0].Compute != 100 || g[1].Compute != 100 {
		t.Errorf("cuda-gpu-test-2: %s; want two whole GPUs", describeAllocation(a))
	}

	// Seed 000: the KETI Job, scheduled by the gpu-scheduler profile, gets
	// one GPU at the MPS default share (10%) on t4-0, the only node whose
	// GPUs run MPS.
	nbody := boundPods(t, client, "userpod", "job-name=nbody-benchmark-mps-test", 1)[0]
	if nbody.Spec.SchedulerName != "gpu-scheduler" {
		t.Errorf("nbody pod has schedulerName %q", nbody.Spec.SchedulerName)
	}
	if a := record(t, &nbody); a.Node != "t4-0" || len(a.Containers[0].GPUs) != 1 || a.Containers[0].GPUs[0].Compute != 10 {
		t.Errorf("nbody: %s on %s; want one GPU of t4-0 at 10%% compute", describeAllocation(a), a.Node)
	}

	// Several GPU containers in one pod, each with its own share.
	multi := boundPod(t, client, "default", "multi-container")
	a = record(t, multi)
	want := map[string]struct {
		kind gpusharev1.ContainerKind
		mib  int64
	}{"warm-cache": {gpusharev1.ContainerInit, 8192}, "server": {gpusharev1.ContainerApp, 20480}, "tokenizer": {gpusharev1.ContainerApp, 4096}}
	if len(a.Containers) != len(want) {
		t.Errorf("multi-container: %s; want 3 containers", describeAllocation(a))
	}
	for _, c := range a.Containers {
		w, ok := want[c.Name]
		if !ok || c.Kind != w.kind || len(c.GPUs) != 1 || c.GPUs[0].MemoryMiB != w.mib {
			t.Errorf("multi-container container %s (%s): %s; want %+v", c.Name, c.Kind, describeAllocation(a), w)
		}
	}
	// 47,000 MiB on H200s (its model annotation): three fit a GPU. The
	// fragmentation-aware default packs them on two GPUs, or on three
	// when the mix it has learned so far makes a 49 GB hole worth more
	// than a 3 GB one (smaller pods fit it): never spread wider.
	perGPU := map[int]int{}
	for _, p := range boundPods(t, client, "default", "app=llm-inference", 6) {
		a := record(t, &p)
		if g := a.Containers[0].GPUs; a.Node != "h200-0" || len(g) != 1 || g[0].MemoryMiB != 47000 {
			t.Errorf("llm-inference pod %s: %s on %s; want 47000 MiB of an H200", p.Name, describeAllocation(a), a.Node)
		} else {
			perGPU[g[0].Index]++
		}
	}
	if len(perGPU) < 2 || len(perGPU) > 3 {
		t.Errorf("llm-inference: replicas by GPU %v; want them on two or three GPUs", perGPU)
	}
	// Nothing lands on the whole-card node but whole GPUs.
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=h100-whole-0"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if !asksForGPU(&pods.Items[i]) {
			continue // the node daemon's own pod, where the chart runs it
		}
		for _, c := range record(t, &pods.Items[i]).Containers {
			for _, g := range c.GPUs {
				if g.Compute != 100 {
					t.Errorf("pod %s got a share (%d%%) of a whole-card node's GPU", pods.Items[i].Name, g.Compute)
				}
			}
		}
	}
	return checkNoOvercommit(t, client)
}

// TestPendingAndRestart: a pod that fits no GPU gets an event with the
// numbers; it is bound as soon as a GPU frees up; a restarted scheduler
// rebuilds its bookings from the pod records and double-books nothing.
func TestPendingAndRestart(t *testing.T) {
	t.Parallel()
	config := readFile(t, "deploy/scheduler-config.yaml")
	c, client, sched := startPlugin(t, config)
	ctx := context.Background()
	createNodes(t, client, controlplane.NodeSpec{Name: "t4-0", Model: "Tesla T4", MemoryMiB: 16384, Count: 1})

	create := func(name string, mib int64) {
		t.Helper()
		if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod(name, mib, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("big", 13384)
	boundPod(t, client, "default", "big")
	create("waiting", 3500)
	msg := failedSchedulingMessage(t, client, "default", "waiting", "largest free share on any GPU is 3000 MiB, pod needs 3500 MiB")
	t.Logf("event: %s", msg)

	// Freeing the GPU schedules the waiting pod at once, not after the
	// scheduler's periodic retry of unschedulable pods (5 minutes).
	start := time.Now()
	if err := client.CoreV1().Pods("default").Delete(ctx, "big", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	boundPod(t, client, "default", "waiting")
	t.Logf("pending pod bound %v after the GPU was freed", time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("pending pod took %v to be bound after the GPU was freed", d)
	}

	// Restart: the new scheduler must see the 3500 MiB booked.
	sched.Stop(10 * time.Second)
	if _, err := c.StartSchedulerAs(ctx, "gpushare-scheduler-2", schedulerBin, accountKubeconfig(t, c, "scheduler"), config); err != nil {
		t.Fatal(err)
	}
	create("too-big", 16384-3500+1)
	failedSchedulingMessage(t, client, "default", "too-big", "largest free share on any GPU is 12884 MiB, pod needs 12885 MiB")
	create("exact", 16384-3500)
	boundPod(t, client, "default", "exact")
	if n, _ := checkNoOvercommit(t, client); n != 2 {
		t.Errorf("%d pods hold GPUs, want 2 (waiting, exact)", n)
	}
}
