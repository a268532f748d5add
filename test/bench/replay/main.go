// Command replay replays the openb trace through the real scheduler (make
// bench-replay) and compares it with the simulator on the same seed.
//
// For each seed it starts a real control plane (etcd, kube-apiserver,
// kube-controller-manager and kwok), creates one kwok node per row of the
// trace's GPU node list with the row's CPU, memory and GPUs (model and
// memory as the simulator gives them, without NVLink or NUMA, which the
// trace does not have), and starts gpushare-scheduler with
// deploy/scheduler-config.yaml (client QPS raised; --policy sets
// nodePolicy in a copy). Then it creates the trace's pods in the
// simulator's arrival order for the seed (sim.Order), each once the
// previous one is decided: bound, or turned away (PodScheduled=False,
// reason Unschedulable), which it deletes as the simulator drops it.
//
// A trace pod becomes a pod that asks its CPU and memory, and
// gpushare.io/gpu-core: GPUMilli/10 percent of one GPU for a share, 100
// per GPU for whole GPUs, which the resource model turns into the request
// sim.Request makes; the models it accepts go in gpushare.io/gpu-models.
//
// The unallocated GPU at 100% is computed as the simulator's replay
// computes it: once the GPU the arrived pods ask reaches the cluster's
// capacity, the capacity less the GPU of the pods bound. The simulator's
// figure is sim.Run on the same seed.
//
// The simulator's policy learns the workload online (sim.Online), as the
// plugin does; --oracle gives it the trace's mix instead.
//
// Alongside, a shadow of the allocation core follows the real cluster:
// before each pod it observes it and picks a node as the simulator would
// (same learner, CPU and memory booked, pod key and seed as the plugin
// hashes them) on the state the real placements made, and counts the
// pods the real scheduler put elsewhere (differ_from_core, of which GPU
// pods: differ_from_core_gpu_pods); the first GPU pod placed elsewhere is
// printed with both nodes' ratings, every one with -v.
//
// --sim-only starts no cluster: it prints the simulator's figure, this
// command's in-process replica of it (which must equal it), and the
// replica with the pods that ask for no GPU placed as kube-scheduler's
// default score plugins place them (--most-allocated: with
// NodeResourcesFit's MostAllocated), which is what gpushare-scheduler
// does with them.
//
// --dra asks each trace pod's GPUs through a ResourceClaim of gpushare's
// DRA devices instead of gpushare.io/gpu-core: a DeviceClass and one
// ResourceSlice per node (pkg/dra's devices of the node's GPUs) are
// created, and a share becomes one device with capacity compute
// GPUMilli/10 and memory 1Mi (a claim that names no memory takes all of
// it), whole GPUs that many devices taken whole, the accepted models a
// selector. --stock then schedules with stock kube-scheduler, whose DRA
// allocator takes the first device that fits, instead of
// gpushare-scheduler.
//
// Flags for quick runs: --max-pods N stops after N pods (the JSON line
// then has the unallocated GPU after them, real and simulated); --until
// 100 stops at 100% arrived, which is all the figure needs (past it many
// pods are turned away, each a slow failed cycle).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	configv1 "github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/dra"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/sim"
	"github.com/gpushare/gpushare/pkg/trace"
	"github.com/gpushare/gpushare/pkg/workload"
)

const (
	namespace = "default"
	// shapeCover is the share of pods the simulator's workload shapes
	// cover (sim.Run's).
	shapeCover = 0.95
)

type options struct {
	openb    string
	workload string
	seeds    []uint64
	policy   string
	maxPods  int
	until    float64
	qps      int
	percent  int
	timeout  time.Duration
	noSim    bool
	oracle   bool
	gpuOnly  bool
	// mostAllocated scores nodes for pods without GPUs by
	// NodeResourcesFit's MostAllocated strategy.
	mostAllocated bool
	bin           string
	verbose       bool
	simFirst      bool
	// dra asks GPUs through ResourceClaims; stock schedules them with
	// stock kube-scheduler.
	dra, stock bool
	// defrag turns gpushare-scheduler's defragmentation on, with movable
	// the share of GPU pods that may move and maxMoves pods per plan.
	defrag   bool
	movable  float64
	maxMoves int
	// spare keeps idle GPUs spare for whole-GPU pods
	// (workload.keepIdleGPUs), in the scheduler and the simulator.
	spare bool
}

// Result is one seed's figures.
type Result struct {
	// Mode is "extended" (gpushare.io/gpu-core), "dra" (claims through
	// gpushare-scheduler) or "dra-stock" (claims through stock
	// kube-scheduler).
	Mode   string `json:"mode"`
	Policy string `json:"policy"`
	// Spare is set with --spare: idle GPUs kept spare for whole-GPU pods.
	Spare bool    `json:"keep_idle_gpus,omitempty"`
	Seed  uint64  `json:"seed"`
	Real  float64 `json:"unallocated_gpu_pct_at_100_real"`
	Sim   float64 `json:"unallocated_gpu_pct_at_100_sim"`
	Pods  int     `json:"pods"`
	// PodsPerS is the pods decided per second of the replay.
	PodsPerS float64 `json:"pods_per_s"`
	WallS    float64 `json:"wall_s"`
	Arrived  float64 `json:"arrived_pct"`
	Unsched  int     `json:"unschedulable"`
	Differ   int     `json:"differ_from_core"`
	DifferGP int     `json:"differ_from_core_gpu_pods"`
	// Partial runs (--max-pods) stop before 100% arrived: then the
	// unallocated GPU at the last pod, real and simulated over the same
	// pods.
	RealEnd *float64 `json:"unallocated_gpu_pct_at_end_real,omitempty"`
	SimEnd  *float64 `json:"unallocated_gpu_pct_at_end_sim,omitempty"`
	// --sim-only: this command's own replay of the simulator's (it should
	// equal Sim), and the same with the pods that ask for no GPU placed
	// by kube-scheduler's default scoring, as in the real cluster.
	SimLocal   *float64 `json:"unallocated_gpu_pct_at_100_sim_local,omitempty"`
	SimKubeCPU *float64 `json:"unallocated_gpu_pct_at_100_sim_kube_cpu_pods,omitempty"`
	// --defrag: pods moved per 20 placed up to 100% arrived, real and
	// simulated, and the real moves' replacements turned away.
	MovedPer20Real *float64 `json:"pods_moved_per_20_placed_real,omitempty"`
	MovedPer20Sim  *float64 `json:"pods_moved_per_20_placed_sim,omitempty"`
	LostMilli      int64    `json:"replacements_turned_away_gpu_milli,omitempty"`
}

func main() {
	var (
		o           options
		seeds, root string
	)
	flag.StringVar(&o.openb, "openb", "../shared/traces/openb", "directory of the openb trace")
	flag.StringVar(&o.workload, "workload", "default", "pod list: openb_pod_list_<workload>.csv")
	flag.StringVar(&seeds, "seeds", "42-44", "seeds: a list (42,43) or a range (42-44)")
	flag.StringVar(&o.policy, "policy", "", "nodePolicy to set in the scheduler config; \"default\" removes it (the plugin's default); empty keeps the config's")
	flag.IntVar(&o.maxPods, "max-pods", 0, "stop after this many pods (0: up to --until)")
	flag.Float64Var(&o.until, "until", 130, "stop once the arrived GPU reaches this % of capacity")
	flag.IntVar(&o.qps, "qps", 2000, "client QPS and burst of the scheduler")
	flag.IntVar(&o.percent, "percentage-of-nodes-to-score", -1, "set percentageOfNodesToScore in the scheduler config (-1: leave the config's)")
	flag.DurationVar(&o.timeout, "decision-timeout", 2*time.Minute, "longest wait for one pod to be decided")
	flag.BoolVar(&o.noSim, "no-sim", false, "skip sim.Run")
	flag.BoolVar(&o.gpuOnly, "gpu-pods-only", false, "leave the trace's pods without GPUs out, in the real replay and the simulator alike")
	flag.BoolVar(&o.mostAllocated, "most-allocated", false, "set NodeResourcesFit's scoringStrategy to MostAllocated in the scheduler config (and in --sim-only's kube-scheduler model)")
	flag.BoolVar(&o.oracle, "oracle", false, "give the simulator and the shadow core the trace's workload instead of learning it online; the scheduler learns unless its config says otherwise")
	flag.BoolVar(&o.simFirst, "sim-only", false, "no cluster: the simulator, this command's replica of it, and the replica with pods without GPUs placed as kube-scheduler places them")
	flag.BoolVar(&o.verbose, "v", false, "log every divergence from the core")
	flag.StringVar(&root, "root", ".", "repository root (for deploy/ and building the scheduler)")
	flag.BoolVar(&o.dra, "dra", false, "ask each pod's GPUs through a ResourceClaim of gpushare's DRA devices")
	flag.BoolVar(&o.stock, "stock", false, "with --dra: schedule with stock kube-scheduler (its DRA allocator) instead of gpushare-scheduler")
	flag.BoolVar(&o.defrag, "defrag", false, "turn gpushare-scheduler's defragmentation on: a share (--movable) of GPU pods may move, this command recreating each as its ReplicaSet would; the simulator moves as many")
	flag.Float64Var(&o.movable, "movable", 0.3, "with --defrag: the share of GPU pods that may move, drawn per pod from the seed")
	flag.IntVar(&o.maxMoves, "max-moves", 3, "with --defrag: the most pods one plan moves")
	flag.BoolVar(&o.spare, "spare", false, "keep idle GPUs spare for whole-GPU pods: workload.keepIdleGPUs in the scheduler config, and the simulator's --spare (the shadow core and --sim-only's replicas keep none)")
	flag.Parse()
	var err error
	if o.seeds, err = parseSeeds(seeds); err != nil {
		fail(err)
	}
	if o.defrag && (o.dra || o.simFirst) {
		fail(fmt.Errorf("--defrag moves extended-resource pods through the real scheduler: not with --dra or --sim-only"))
	}
	if o.stock && !o.dra {
		fail(fmt.Errorf("--stock needs --dra: stock kube-scheduler cannot place gpushare.io/gpu-core"))
	}
	if err := os.Chdir(root); err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "gpushare-replay-")
	if err != nil {
		fail(err)
	}
	o.bin = dir
	err = run(ctx, o)
	_ = os.RemoveAll(dir)
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-replay:", err)
	os.Exit(1)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %q", f)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("--seeds: %q", f)
			}
		}
		for x := a; x <= b; x++ {
			out = append(out, x)
		}
	}
	return out, nil
}

func run(ctx context.Context, o options) error {
	nodes, err := trace.ReadNodesFile(filepath.Join(o.openb, "openb_node_list_gpu_node.csv"))
	if err != nil {
		return err
	}
	pods, err := trace.ReadPodsFile(filepath.Join(o.openb, "openb_pod_list_"+o.workload+".csv"))
	if err != nil {
		return err
	}
	if o.gpuOnly {
		gpuPods := pods[:0]
		for _, p := range pods {
			if p.GPUs > 0 {
				gpuPods = append(gpuPods, p)
			}
		}
		pods = gpuPods
	}
	w := &sim.Workload{Name: o.workload, Nodes: nodes, Pods: pods}
	config, policy, err := schedulerConfig(o)
	if err != nil {
		return err
	}
	progress("policy %s; %d nodes, %d pods in the trace", policy, len(nodes), len(pods))
	if !o.simFirst {
		build := exec.CommandContext(ctx, "go", "build", "-o", o.bin+"/", "./cmd/gpushare-scheduler")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building: %w", err)
		}
	}
	tools, err := controlplane.FindTools("")
	if err != nil && !o.simFirst {
		return err
	}
	for _, seed := range o.seeds {
		r := Result{Mode: o.mode(), Policy: policy, Spare: o.spare, Seed: seed}
		if !o.noSim {
			if err := simulate(ctx, w, policy, seed, o, &r); err != nil {
				return err
			}
		}
		if o.simFirst {
			cn, err := w.CoreNodes()
			if err != nil {
				return err
			}
			local, _, err := localSim(w, cn, policy, seed, 0, o.oracle, false, false)
			if err != nil {
				return err
			}
			kube, _, err := localSim(w, cn, policy, seed, 0, o.oracle, true, o.mostAllocated)
			if err != nil {
				return err
			}
			r.SimLocal, r.SimKubeCPU = &local, &kube
		} else {
			if err := replay(ctx, o, tools, w, config, policy, seed, &r); err != nil {
				return fmt.Errorf("seed %d: %w", seed, err)
			}
		}
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	}
	return nil
}

// simulate is the simulator's unallocated GPU at 100% for the seed.
func simulate(ctx context.Context, w *sim.Workload, policy string, seed uint64, o options, r *Result) error {
	t0 := time.Now()
	so := simOptions(o.oracle)
	so.Learn.Spare = o.spare
	// Claims through gpushare-scheduler take the first GPUs that fit on
	// the node its policy picks: so does the simulator's replay of them.
	so.Claims = o.dra && !o.stock
	if o.defrag {
		so.Defrag = &sim.Defrag{Movable: o.movable, Budget: alloc.DefragBudget{MaxMoves: o.maxMoves, MaxTargets: configv1.DefaultDefragMaxTargets}}
	}
	res, err := sim.Run(ctx, w, policy, []uint64{seed}, so)
	if err != nil {
		return err
	}
	progress("seed %d: simulator %.3f%% unallocated at 100%% (%.1fs)", seed, res.PerSeed[0], time.Since(t0).Seconds())
	r.Sim = res.PerSeed[0]
	if o.defrag {
		per20 := 20 * res.MovedPerPlaced100
		r.MovedPer20Sim = &per20
	}
	return nil
}

var (
	nodePolicyLine = regexp.MustCompile(`(?m)^[ \t]*nodePolicy:.*\n`)
	argsKindLine   = regexp.MustCompile(`(?m)^([ \t]*)kind: GPUShareArgs\n`)
	policyValue    = regexp.MustCompile(`(?m)^[ \t]*nodePolicy:[ \t]*([A-Za-z0-9_/-]+)`)
	percentLine    = regexp.MustCompile(`(?m)^percentageOfNodesToScore:.*\n`)
)

// schedulerConfig returns deploy/scheduler-config.yaml with the
// benchmark's client rate limit and, if asked, another node policy or
// percentageOfNodesToScore; and the node policy it runs.
func schedulerConfig(o options) ([]byte, string, error) {
	const path = "deploy/scheduler-config.yaml"
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	if !bytes.Contains(b, []byte("qps: 200")) || !bytes.Contains(b, []byte("burst: 400")) {
		return nil, "", fmt.Errorf("%s: expected clientConnection qps: 200 and burst: 400 to replace", path)
	}
	b = bytes.Replace(b, []byte("qps: 200"), []byte("qps: "+strconv.Itoa(o.qps)), 1)
	b = bytes.Replace(b, []byte("burst: 400"), []byte("burst: "+strconv.Itoa(o.qps)), 1)
	switch o.policy {
	case "":
	case "default":
		// No nodePolicy: the plugin's default.
		b = nodePolicyLine.ReplaceAll(b, nil)
	default:
		b = nodePolicyLine.ReplaceAll(b, nil)
		b = argsKindLine.ReplaceAll(b, []byte("${1}kind: GPUShareArgs\n${1}nodePolicy: "+o.policy+"\n"))
	}
	if o.defrag {
		b = argsKindLine.ReplaceAll(b, []byte(fmt.Sprintf("${1}kind: GPUShareArgs\n${1}defrag: {enabled: true, maxMoves: %d, plansPerMinute: 1000, timeout: 60s}\n", o.maxMoves)))
	}
	if o.spare {
		b = argsKindLine.ReplaceAll(b, []byte("${1}kind: GPUShareArgs\n${1}workload: {keepIdleGPUs: true}\n"))
	}
	if o.mostAllocated {
		const fit = "  - name: NodeResourcesFit\n    args:\n"
		if !bytes.Contains(b, []byte(fit)) {
			return nil, "", fmt.Errorf("%s: no NodeResourcesFit args to set the scoring strategy in", path)
		}
		b = bytes.ReplaceAll(b, []byte(fit), []byte(fit+"      scoringStrategy:\n        type: MostAllocated\n"))
	}
	if o.percent >= 0 {
		b = percentLine.ReplaceAll(b, nil)
		b = bytes.Replace(b, []byte("\nprofiles:\n"), []byte("\npercentageOfNodesToScore: "+strconv.Itoa(o.percent)+"\nprofiles:\n"), 1)
	}
	policy := configv1.DefaultNodePolicy
	if m := policyValue.FindSubmatch(b); m != nil {
		policy = string(m[1])
	}
	return b, policy, nil
}

// podName is the name of the k-th arrival, trace pod p: repeated draws of
// a trace pod get names of their own.
func podName(k int, p *trace.Pod) string { return fmt.Sprintf("r%05d-%s", k, p.Name) }

// kubePod translates a trace pod.
func kubePod(name string, p *trace.Pod) *corev1.Pod {
	req := corev1.ResourceList{
		corev1.ResourceCPU:    *k8sresource.NewMilliQuantity(p.CPUMilli, k8sresource.DecimalSI),
		corev1.ResourceMemory: *k8sresource.NewQuantity(p.MemoryMiB<<20, k8sresource.BinarySI),
	}
	var limits corev1.ResourceList
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": "replay"}}}
	if p.GPUs > 0 {
		core := p.GPUMilli / 10
		if p.GPUMilli >= 1000 {
			core = 100 * int64(p.GPUs)
		}
		q := *k8sresource.NewQuantity(core, k8sresource.DecimalSI)
		limits = corev1.ResourceList{"gpushare.io/gpu-core": q}
		req["gpushare.io/gpu-core"] = q
		if len(p.Models) > 0 {
			pod.Annotations = map[string]string{configv1.DefaultModelsAnnotation: strings.Join(p.Models, "|")}
		}
	}
	pod.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
		Resources: corev1.ResourceRequirements{Requests: req, Limits: limits}}}}
	var zero int64
	pod.Spec.TerminationGracePeriodSeconds = &zero
	return pod
}

// kubeNode is the trace node as a kwok node: the inventory gpushare-node
// would publish for the core's GPUs, the trace's CPU and memory.
func kubeNode(n *alloc.Node) (*corev1.Node, corev1.ResourceList, error) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        n.Name,
		Labels:      map[string]string{"type": "kwok", corev1.LabelHostname: n.Name},
		Annotations: map[string]string{controlplane.KwokAnnotation: "fake"},
	}}
	if len(n.GPUs) > 0 {
		inv := &gpusharev1.GPUInventory{Mode: gpusharev1.ModeShared}
		for _, g := range n.GPUs {
			inv.GPUs = append(inv.GPUs, gpusharev1.GPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
				Healthy: true, NUMANode: -1})
		}
		value, err := gpusharev1.Marshal(inv)
		if err != nil {
			return nil, nil, err
		}
		node.Labels[gpusharev1.NodeLabel] = "true"
		node.Annotations[gpusharev1.InventoryAnnotation] = value
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *k8sresource.NewMilliQuantity(n.CPUMilli, k8sresource.DecimalSI),
		corev1.ResourceMemory: *k8sresource.NewQuantity(n.MemoryMiB<<20, k8sresource.BinarySI),
		corev1.ResourcePods:   *k8sresource.NewQuantity(1000, k8sresource.DecimalSI),
	}
	return node, res, nil
}

func createNode(ctx context.Context, client kubernetes.Interface, n *alloc.Node) error {
	node, _, err := kubeNode(n)
	if err != nil {
		return err
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", n.Name, err)
	}
	return setStatus(ctx, client, n)
}

// setStatus sets the node's capacity and allocatable to the trace's.
func setStatus(ctx context.Context, client kubernetes.Interface, n *alloc.Node) error {
	_, res, err := kubeNode(n)
	if err != nil {
		return err
	}
	// kwok updates the node's status too: retry on conflicts.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Capacity, cur.Status.Allocatable = res, res
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// waitNodes waits until every node is Ready, untainted and has the
// trace's allocatable.
func waitNodes(ctx context.Context, client kubernetes.Interface, nodes []*alloc.Node) error {
	want := make(map[string]*alloc.Node, len(nodes))
	for _, n := range nodes {
		want[n.Name] = n
	}
	deadline := time.Now().Add(5 * time.Minute)
	report := time.Now().Add(10 * time.Second)
	for {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for i := range list.Items {
			n := &list.Items[i]
			a, ok := want[n.Name]
			if !ok {
				continue
			}
			if n.Status.Allocatable.Cpu().MilliValue() != a.CPUMilli || n.Status.Allocatable.Memory().Value() != a.MemoryMiB<<20 {
				// kwok initialised the node from a status read before
				// ours was written: write ours again.
				if err := setStatus(ctx, client, a); err != nil {
					return err
				}
				continue
			}
			if len(n.Spec.Taints) > 0 {
				continue
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready == len(nodes) {
			return nil
		}
		if time.Now().After(report) {
			progress("%d of %d nodes ready and untainted", ready, len(nodes))
			report = time.Now().Add(10 * time.Second)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d nodes ready and untainted", ready, len(nodes))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// outcome is how the scheduler decided a pod.
type outcome struct {
	node       string
	allocation string
	// claim is a claims pod's ResourceClaim, read once it is bound.
	claim  *resourceapi.ResourceClaim
	reason string // PodScheduled=False's message when turned away
}

// decisions delivers each watched pod's outcome once.
type decisions struct {
	mu      sync.Mutex
	waiting map[string]chan outcome
	gpu     map[string]bool
}

func (d *decisions) expect(name string, gpu bool) chan outcome {
	ch := make(chan outcome, 1)
	d.mu.Lock()
	d.waiting[name] = ch
	d.gpu[name] = gpu
	d.mu.Unlock()
	return ch
}

// forget stops waiting for pod name.
func (d *decisions) forget(name string) {
	d.mu.Lock()
	delete(d.waiting, name)
	delete(d.gpu, name)
	d.mu.Unlock()
}

func (d *decisions) seen(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	var o outcome
	switch {
	case p.Spec.NodeName != "":
		o = outcome{node: p.Spec.NodeName, allocation: p.Annotations[gpusharev1.AllocationAnnotation]}
	default:
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				o = outcome{reason: c.Message}
			}
		}
		if o.reason == "" {
			return
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ch, ok := d.waiting[p.Name]
	if !ok {
		return
	}
	// GPUShare binds with the allocation record: a bound GPU pod
	// without one is the record still on its way.
	if o.node != "" && d.gpu[p.Name] && o.allocation == "" {
		return
	}
	delete(d.waiting, p.Name)
	delete(d.gpu, p.Name)
	ch <- o
}

// shadow is the allocation core following the real cluster.
type shadow struct {
	policy  *workload.Policy
	states  []*alloc.NodeState
	index   map[string]int
	seed    uint64
	differ  int
	differG int
	first   string
}

func replay(ctx context.Context, o options, tools controlplane.Tools, w *sim.Workload, config []byte, policy string, seed uint64, r *Result) error {
	start := time.Now()
	nodes, err := w.CoreNodes()
	if err != nil {
		return err
	}
	sh, err := newShadow(w, nodes, policy, config, o.oracle)
	if err != nil {
		return err
	}
	progress("seed %d: starting the control plane", seed)
	co := controlplane.Options{Tools: tools, QPS: 5000, Burst: 10000}
	if o.defrag {
		// The movable pods' ReplicaSets are played by this command: the
		// garbage collector would delete pods whose owner does not exist.
		co.ControllerManagerArgs = []string{"--controllers=*,-garbage-collector-controller"}
	}
	c, err := controlplane.Start(ctx, co)
	if err != nil {
		return err
	}
	defer c.Stop()
	client, err := c.Client()
	if err != nil {
		return err
	}
	progress("creating %d kwok nodes", len(nodes))
	if err := controlplane.Parallel(ctx, len(nodes), func(i int) error { return createNode(ctx, client, nodes[i]) }); err != nil {
		return err
	}
	if err := waitNodes(ctx, client, nodes); err != nil {
		return err
	}
	if o.dra {
		progress("publishing %d nodes' GPUs as DRA devices", len(nodes))
		if err := createDevices(ctx, client, nodes); err != nil {
			return err
		}
	}
	d := &decisions{waiting: map[string]chan outcome{}, gpu: map[string]bool{}}
	var dm *mover
	if o.defrag {
		dm = newMover(client, d, seed, o.movable)
	}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	_, _ = f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: d.seen, UpdateFunc: func(_, obj any) { d.seen(obj) },
		DeleteFunc: func(obj any) {
			if dm != nil {
				if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = t.Obj
				}
				dm.gone(obj)
			}
		},
	})
	quit := make(chan struct{})
	defer close(quit)
	f.Start(quit)
	f.WaitForCacheSync(quit)

	rbac, err := os.ReadFile("deploy/scheduler-rbac.yaml")
	if err != nil {
		return err
	}
	if o.defrag {
		rbac = append(rbac, evictionRBAC...)
	}
	kubeconfig, err := c.RoleKubeconfig(ctx, rbac, "kube-system", "gpushare-scheduler", 24*time.Hour)
	if err != nil {
		return err
	}
	if o.stock {
		if _, err := c.StartScheduler(ctx, "kube-scheduler", tools.Bin("kube-scheduler"), controlplane.StockSchedulerConfig(o.qps), "--v=1"); err != nil {
			return err
		}
	} else if _, err := c.StartSchedulerAs(ctx, "gpushare-scheduler", filepath.Join(o.bin, "gpushare-scheduler"), kubeconfig, config, "--v=1"); err != nil {
		return err
	}
	progress("seed %d: the scheduler is running (%s); replaying", seed, r.Mode)

	capacity := float64(w.Capacity())
	var arrived, allocated int64
	placed := 0
	seen100 := false
	t0 := time.Now()
	for k, i := range sim.Order(w, seed) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if (o.maxPods > 0 && k >= o.maxPods) || float64(arrived) >= o.until/100*capacity {
			break
		}
		p := &w.Pods[i]
		name := podName(k, p)
		want := ""
		if dm == nil {
			// With moves the shadow core's state would go stale.
			want = sh.pick(name, p)
		}
		// GPUShare binds an extended-resource pod with its record; a
		// claims pod is bound without one.
		ch := d.expect(name, p.GPUs > 0 && !o.dra)
		pod := kubePod(name, p)
		if o.dra && p.GPUs > 0 {
			pod = draPod(name, p)
			if _, err := client.ResourceV1().ResourceClaims(namespace).Create(ctx, kubeClaim(name, p), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating claim %s: %w", name, err)
			}
		}
		if dm != nil && p.GPUs > 0 {
			dm.mark(pod, p.RequestedMilli())
		}
		if _, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", name, err)
		}
		var got outcome
		select {
		case got = <-ch:
		case <-time.After(o.timeout):
			return fmt.Errorf("pod %s (%d of the order) not decided after %v", name, k, o.timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
		if got.node == "" && dm != nil && planned(got.reason) {
			if got, err = awaitMoves(ctx, client, d, name); err != nil {
				return err
			}
		}
		if got.node == "" {
			r.Unsched++
			if dm != nil {
				dm.deleting(name)
			}
			err := client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if o.dra && p.GPUs > 0 {
				err := client.ResourceV1().ResourceClaims(namespace).Delete(ctx, name, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					return err
				}
			}
		} else {
			placed++
			allocated += p.RequestedMilli()
			if o.dra && p.GPUs > 0 {
				if got.claim, err = client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
					return fmt.Errorf("claim of bound pod %s: %w", name, err)
				}
			}
		}
		if dm == nil {
			if err := sh.follow(k, name, p, want, got, o.verbose); err != nil {
				return err
			}
		}
		arrived += p.RequestedMilli()
		r.Pods++
		if !seen100 && float64(arrived) >= capacity {
			seen100 = true
			if dm != nil {
				moved, lost := dm.settle(ctx)
				allocated -= lost
				per20 := 20 * float64(moved) / float64(placed)
				r.MovedPer20Real, r.LostMilli = &per20, lost
				progress("seed %d: %d pods moved, %d placed", seed, moved, placed)
			}
			r.Real = 100 * (capacity - float64(allocated)) / capacity
			progress("seed %d: 100%% arrived after %d pods: %.3f%% unallocated (%d placed elsewhere than the core would)", seed, r.Pods, r.Real, sh.differ)
		}
		if r.Pods%500 == 0 {
			progress("seed %d: %d pods, %.1f%% arrived, %.2f%% allocated, %d turned away, %d elsewhere than the core (%d GPU pods), %.1f pods/s",
				seed, r.Pods, 100*float64(arrived)/capacity, 100*float64(allocated)/capacity, r.Unsched, sh.differ, sh.differG,
				float64(r.Pods)/time.Since(t0).Seconds())
		}
	}
	r.Arrived = 100 * float64(arrived) / capacity
	r.PodsPerS = float64(r.Pods) / time.Since(t0).Seconds()
	r.Differ, r.DifferGP = sh.differ, sh.differG
	if !seen100 {
		end := 100 * (capacity - float64(allocated)) / capacity
		r.RealEnd = &end
		_, s, err := localSim(w, nodes, policy, seed, r.Pods, o.oracle, false, false)
		if err != nil {
			return err
		}
		r.SimEnd = &s
	}
	if sh.first != "" {
		progress("seed %d: first pod placed elsewhere than the core would: %s", seed, sh.first)
	}
	r.WallS = time.Since(start).Seconds()
	return nil
}

// newPolicy is the policy the plugin and the simulator run: the trace's
// workload (oracle) or one learned from the pods observed, with the
// learner's defaults (the plugin's when GPUShareArgs has no workload),
// weighed against the nodes' GPUs per kind and what states leaves free
// of them (as the plugin's cache counts them).
func newPolicy(w *sim.Workload, nodes []*alloc.Node, states []*alloc.NodeState, policy string, seed uint64, oracle bool) (*workload.Policy, error) {
	node, gpu, _ := strings.Cut(policy, "/")
	cfg := alloc.Config{Node: node, GPU: gpu, Options: alloc.Options{Seed: seed, Supply: alloc.SupplyOf(nodes)}}
	if oracle {
		cfg.Workload = sim.Shapes(w.Pods, shapeCover)
	}
	pl, err := workload.NewPolicy(cfg, workload.Config{})
	if err == nil {
		pl.Follow(sim.Left(states))
	}
	return pl, err
}

// newShadow builds the core the plugin runs: the node policy, the
// config's seed (the plugin's tie-break hash), the trace's workload.
func newShadow(w *sim.Workload, nodes []*alloc.Node, policy string, config []byte, oracle bool) (*shadow, error) {
	var seed uint64
	if m := regexp.MustCompile(`(?m)^[ \t]*seed:[ \t]*([0-9]+)`).FindSubmatch(config); m != nil {
		seed, _ = strconv.ParseUint(string(m[1]), 10, 64)
	}
	s := &shadow{seed: seed, index: map[string]int{}}
	for i, n := range nodes {
		s.states = append(s.states, alloc.NewNodeState(n))
		s.index[n.Name] = i
	}
	pl, err := newPolicy(w, nodes, s.states, policy, seed, oracle)
	if err != nil {
		return nil, err
	}
	s.policy = pl
	return s, nil
}

func (s *shadow) request(name string, p *trace.Pod) alloc.PodRequest {
	req := sim.Request(p)
	req.Key = namespace + "/" + name
	return req
}

// pick is the core's choice for the pod on the shadow's state: a node
// name, "" if none fits.
func (s *shadow) pick(name string, p *trace.Pod) string {
	req := s.request(name, p)
	s.policy.Observe(req.Key, &req)
	d := s.policy.Placer().Pick(s.states, &req, s.seed)
	if d.Placement == nil {
		return ""
	}
	return d.Placement.Node
}

// follow applies the real placement to the shadow and counts a divergence.
func (s *shadow) follow(k int, name string, p *trace.Pod, want string, got outcome, verbose bool) error {
	if want != got.node {
		s.differ++
		if p.GPUs > 0 {
			s.differG++
		}
		msg := fmt.Sprintf("pod %d %s (%d GPUs, %d milli, models %v, cpu %dm, mem %dMi): real %q, core %q",
			k, name, p.GPUs, p.GPUMilli, p.Models, p.CPUMilli, p.MemoryMiB, got.node, want)
		if got.node != "" && want != "" {
			msg += "; " + s.explain(name, p, got.node, want)
		} else if got.node == "" {
			msg += "; real turned it away: " + got.reason
		}
		if s.first == "" && p.GPUs > 0 {
			s.first = msg
			progress("first GPU pod placed elsewhere than the core would: %s", msg)
		} else if verbose {
			progress("elsewhere: %s", msg)
		}
	}
	if got.node == "" {
		return nil
	}
	i, ok := s.index[got.node]
	if !ok {
		return fmt.Errorf("pod %s bound to unknown node %s", name, got.node)
	}
	st := s.states[i]
	pl := &alloc.Placement{Node: got.node}
	if got.claim != nil {
		var err error
		if pl, err = claimPlacement(got.claim, st.Node); err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
	}
	if got.allocation != "" {
		a, err := gpusharev1.ParseAllocation(got.allocation)
		if err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
		if pl, err = record.PlacementFrom(a, st.Node); err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
	}
	pl.CPUMilli, pl.MemoryMiB = p.CPUMilli, p.MemoryMiB
	if err := st.Apply(pl); err != nil {
		return fmt.Errorf("pod %s on %s: the core's state refuses the real placement: %w", name, got.node, err)
	}
	return nil
}

// explain rates the pod on the real node and the core's.
func (s *shadow) explain(name string, p *trace.Pod, chosen, core string) string {
	req := s.request(name, p)
	r := s.policy.Placer().NewRater(&req, s.seed)
	var parts []string
	for _, n := range []string{chosen, core} {
		st := s.states[s.index[n]]
		rt, unfit := r.Rate(st)
		if unfit != nil {
			parts = append(parts, fmt.Sprintf("%s: unfit (%v)", n, unfit))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: score %+v tie %d (cpu %d/%d, gpus %v)", n, rt.Score, rt.Tie, st.CPUMilli, st.Node.CPUMilli, st.GPUs))
	}
	return strings.Join(parts, "; ")
}

// localSim replays the seed's order in-process as the simulator does
// (pkg/sim's replay), for at most n pods (0: all) and returns the
// unallocated GPU at 100% arrived (-1 if not reached) and after the last
// pod. With kubeCPU, pods that ask for no GPU go where kube-scheduler's
// default scoring puts them (NodeResourcesFit's LeastAllocated plus
// NodeResourcesBalancedAllocation, ties at random), as in the real
// cluster, where GPUShare leaves them to it.
func localSim(w *sim.Workload, nodes []*alloc.Node, policy string, seed uint64, n int, oracle, kubeCPU, mostAllocated bool) (at100, end float64, err error) {
	states := make([]*alloc.NodeState, len(nodes))
	for i, nd := range nodes {
		states[i] = alloc.NewNodeState(nd)
	}
	pl, err := newPolicy(w, nodes, states, policy, seed, oracle)
	if err != nil {
		return 0, 0, err
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	capacity := float64(w.Capacity())
	var arrived, allocated int64
	at100 = -1
	for k, i := range sim.Order(w, seed) {
		if n > 0 && k >= n {
			break
		}
		p := &w.Pods[i]
		req := sim.Request(p)
		pl.Observe(strconv.Itoa(k), &req)
		var placement *alloc.Placement
		var idx int
		if kubeCPU && p.GPUs == 0 {
			idx = kubePick(states, p, rng, mostAllocated)
			if idx >= 0 {
				placement = &alloc.Placement{Node: states[idx].Node.Name, CPUMilli: p.CPUMilli, MemoryMiB: p.MemoryMiB}
			}
		} else {
			d := pl.Placer().Pick(states, &req, seed)
			placement, idx = d.Placement, d.Index
		}
		if placement != nil {
			if err := states[idx].Apply(placement); err != nil {
				return 0, 0, err
			}
			allocated += p.RequestedMilli()
		}
		arrived += p.RequestedMilli()
		if at100 < 0 && float64(arrived) >= capacity {
			at100 = 100 * (capacity - float64(allocated)) / capacity
		}
	}
	return at100, 100 * (capacity - float64(allocated)) / capacity, nil
}

// kubePick is kube-scheduler's choice, by its default score plugins, for
// a pod that asks for no GPU: the feasible node with the highest
// LeastAllocated plus BalancedAllocation score (CPU and memory weighed
// alike), ties at random; -1 if none fits.
func kubePick(states []*alloc.NodeState, p *trace.Pod, rng *rand.Rand, mostAllocated bool) int {
	best, bestScore, ties := -1, int64(-1), 0
	for i, s := range states {
		cpu, mem := s.CPUMilli+p.CPUMilli, s.MemoryMiB+p.MemoryMiB
		if cpu > s.Node.CPUMilli || mem > s.Node.MemoryMiB {
			continue
		}
		least := ((s.Node.CPUMilli-cpu)*100/s.Node.CPUMilli + (s.Node.MemoryMiB-mem)*100/s.Node.MemoryMiB) / 2
		if mostAllocated {
			least = (cpu*100/s.Node.CPUMilli + mem*100/s.Node.MemoryMiB) / 2
		}
		fc, fm := float64(cpu)/float64(s.Node.CPUMilli), float64(mem)/float64(s.Node.MemoryMiB)
		std := math.Abs(fc-fm) / 2
		balanced := int64((1 - std) * 100)
		score := least + balanced
		switch {
		case score > bestScore:
			best, bestScore, ties = i, score, 1
		case score == bestScore:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// simOptions are sim.Run's options: one seed at a time, the workload
// learned online as the scheduler learns it, or the trace's.
func simOptions(oracle bool) sim.Options {
	o := sim.Options{Parallel: 1, Workload: sim.Online}
	if oracle {
		o.Workload = sim.Oracle
	}
	return o
}

// mode names what the replay runs (Result.Mode).
func (o options) mode() string {
	switch {
	case o.stock:
		return "dra-stock"
	case o.dra:
		return "dra"
	}
	return "extended"
}

// createDevices creates the DeviceClass of gpushare's devices, as the
// chart does, and each GPU node's ResourceSlice, as gpushare-dra
// publishes it, with the inventory's memory usable.
func createDevices(ctx context.Context, client kubernetes.Interface, nodes []*alloc.Node) error {
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: claim.Class}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + dra.Driver + `"`}}},
	}}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return err
	}
	return controlplane.Parallel(ctx, len(nodes), func(i int) error {
		n := nodes[i]
		if len(n.GPUs) == 0 {
			return nil
		}
		gpus := make([]gpu.Device, len(n.GPUs))
		for k, g := range n.GPUs {
			gpus[k] = gpu.Device{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB, UsableMemoryMiB: g.MemoryMiB,
				NUMANode: -1, Healthy: true}
		}
		slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-" + dra.Driver}, Spec: resourceapi.ResourceSliceSpec{
			Driver: dra.Driver, Pool: resourceapi.ResourcePool{Name: n.Name, ResourceSliceCount: 1}, NodeName: &n.Name,
			Devices: dra.Devices(gpus, dra.Options{}),
		}}
		_, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
		return err
	})
}

// kubeClaim is the trace pod's GPUs as a claim of gpushare's devices:
// a share is one device's compute GPUMilli/10 and 1Mi of its memory,
// whole GPUs that many devices taken whole.
func kubeClaim(name string, p *trace.Pod) *resourceapi.ResourceClaim {
	e := &resourceapi.ExactDeviceRequest{DeviceClassName: claim.Class, AllocationMode: resourceapi.DeviceAllocationModeExactCount,
		Count: int64(p.GPUs)}
	if p.GPUMilli < 1000 {
		e.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{
			dra.Memory:  *k8sresource.NewQuantity(1<<20, k8sresource.BinarySI),
			dra.Compute: *k8sresource.NewQuantity(p.GPUMilli/10, k8sresource.DecimalSI),
		}}
	}
	if len(p.Models) > 0 {
		quoted := make([]string, len(p.Models))
		for i, m := range p.Models {
			quoted[i] = strconv.Quote(m)
		}
		e.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.attributes["` + dra.Driver + `"].model in [` + strings.Join(quoted, ", ") + `]`}}}
	}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: e}}}}}
}

// draPod is the trace pod asking its GPUs through claim name.
func draPod(name string, p *trace.Pod) *corev1.Pod {
	pod := kubePod(name, &trace.Pod{Name: p.Name, CPUMilli: p.CPUMilli, MemoryMiB: p.MemoryMiB})
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	return pod
}

// claimPlacement is what a bound pod's claim holds, on node.
func claimPlacement(rc *resourceapi.ResourceClaim, node *alloc.Node) (*alloc.Placement, error) {
	_, gpus, err := claim.Held(rc)
	if err != nil {
		return nil, err
	}
	return claim.Placement("claim "+rc.Name, gpus, node)
}
