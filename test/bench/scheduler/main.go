// Command scheduler is gpushare's scheduling throughput benchmark (make
// bench-scheduler). For each node count it starts a real control plane,
// creates the nodes (8 GPUs each) and the fractional-GPU pods, then starts
// one scheduler and times how fast it binds them all:
//
//   - gpushare: gpushare-scheduler with deploy/scheduler-config.yaml; pods
//     ask gpushare.io/gpu-mem.
//   - stock: kube-scheduler with no extender; pods ask a plain extended
//     resource the nodes advertise (what kube-scheduler alone can do).
//   - stock-record: stock, with pods that carry from their creation an
//     annotation of the size of gpushare's allocation record: what
//     storing and streaming the record costs the control plane, without
//     gpushare's scheduling.
//   - extender: kube-scheduler with gpushare-extender and
//     deploy/extender-scheduler-config.yaml; pods ask gpushare.io/gpu-mem.
//   - extender-null: kube-scheduler with the same configuration and
//     nullextender, which passes each pod on one of the nodes named and
//     binds it: the floor under any extender's pods/s.
//   - extender-floor: the same, nullextender also following the pods and
//     nodes with informers and binding with an allocation record of
//     gpushare's size: the floor under any extender that keeps its own
//     record of the GPUs, as gpushare-extender does.
//   - gpushare-watch: gpushare, with a gpushare-extender beside it that
//     no scheduler calls: what the extender's watches alone cost.
//   - dra, dra-stock: pods ask the same memory through ResourceClaims, with
//     gpushare-scheduler or stock kube-scheduler's DRA allocator (dra.go).
//
// Every scheduler gets the same client rate limit (--qps, --burst). Nodes
// have no kubelet or kwok: the node lifecycle controller is off so that
// they stay schedulable. Throughput is the pods bound over the time from
// the first bind to the last; RSS is the scheduler's (and the extender's)
// resident memory once every pod is bound, and its peak. Each run also
// gives every process's CPU time per pod, and the mean wall time of the
// scheduler's scheduling algorithm, which it runs one pod at a time: with
// the extender, that includes the filter call's round trip.
package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// stockResource is the plain extended resource of the stock runs.
const stockResource corev1.ResourceName = "bench.gpushare.io/gpu-mem"

const gpuMiB = 81920

type options struct {
	nodes   []int
	pods    int
	modes   []string
	qps     int
	bin     string
	timeout time.Duration
	json    bool
	profile string
	repeat  int
	// extenderFlags are added to gpushare-extender's command line.
	extenderFlags []string
}

// Result is one run's figures.
type Result struct {
	Mode  string `json:"mode"`
	Nodes int    `json:"nodes"`
	Pods  int    `json:"pods"`
	// PodsPerSecond is Pods over the time from the first bind to the last.
	PodsPerSecond float64 `json:"pods_per_second"`
	// MedianPerSecond is the median of the per-second bind counts.
	MedianPerSecond float64 `json:"median_pods_per_second"`
	Seconds         float64 `json:"seconds"`
	RSSMiB          float64 `json:"rss_mib"`
	PeakRSSMiB      float64 `json:"peak_rss_mib"`
	// FileRSSMiB is the part of RSSMiB that maps files (the binaries'
	// code and data), the rest being anonymous memory (heap, stacks).
	FileRSSMiB float64 `json:"file_rss_mib"`
	// CPUPerPod is each process's CPU time per pod bound, in ms, from
	// the scheduler's start to the last bind: the scheduler (and the
	// extender) and the control plane that serves them.
	CPUPerPod map[string]float64 `json:"cpu_ms_per_pod"`
	// BindCPUPerPod is the same from the first bind to the last, the
	// span PodsPerSecond is measured over: without the schedulers'
	// start and first list of the cluster.
	BindCPUPerPod map[string]float64 `json:"bind_cpu_ms_per_pod"`
	// AlgorithmMs is the mean of the scheduler's
	// scheduler_scheduling_algorithm_duration_seconds: the wall time of
	// each pod's filtering and scoring (and the extender's filter call),
	// which the scheduler does one pod at a time.
	AlgorithmMs float64 `json:"algorithm_ms,omitempty"`
	// ExtenderFilterMs is the mean time the extender spent serving a
	// filter call (gpushare_extender_request_duration_seconds), from its
	// handler's start to the end of its answer.
	ExtenderFilterMs float64 `json:"extender_filter_ms,omitempty"`
}

// knownModes are the schedulers --modes may name.
var knownModes = []string{"gpushare", "stock", "stock-record", "extender", "extender-null", "extender-floor", "gpushare-watch", "dra", "dra-stock"}

func main() {
	var (
		o                  options
		nodes, modes, root string
	)
	flag.StringVar(&nodes, "nodes", "1000,5000", "node counts, comma-separated")
	flag.IntVar(&o.pods, "pods", 10000, "pods per run")
	flag.StringVar(&modes, "modes", "gpushare,stock,extender", "schedulers to run: gpushare, stock, extender; stock-record (stock with pods the size of gpushare's); extender-null (kube-scheduler with an extender that does nothing: the floor of any extender); extender-floor (extender-null following the cluster and writing a record: the floor of an extender that books GPUs); gpushare-watch (gpushare beside an extender no scheduler calls); dra, dra-stock (GPU memory through ResourceClaims)")
	flag.IntVar(&o.qps, "qps", 5000, "client QPS and burst of every scheduler and of the extender")
	flag.StringVar(&root, "root", ".", "repository root (for deploy/ and building the binaries)")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "longest wait for one run's pods to be bound")
	flag.BoolVar(&o.json, "json", false, "print one JSON object per run instead of a table")
	flag.StringVar(&o.profile, "cpu-profile", "", "write a 20 s CPU profile of each scheduler and of kube-apiserver to this directory, each scheduler's metrics and heap profile after the CPU profile and once every pod is bound, and kube-apiserver's metrics before and after")
	flag.IntVar(&o.repeat, "repeat", 1, "run the modes this many times, interleaved (every other round in reverse order), and report medians")
	extenderFlags := flag.String("extender-flags", "", "more flags for gpushare-extender, space-separated (e.g. --max-filtered-nodes=1)")
	flag.Parse()
	o.extenderFlags = strings.Fields(*extenderFlags)
	for f := range strings.SplitSeq(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fail(fmt.Errorf("--nodes: %q is not a positive number", f))
		}
		o.nodes = append(o.nodes, n)
	}
	o.modes = strings.Split(modes, ",")
	for _, m := range o.modes {
		if !slices.Contains(knownModes, m) {
			fail(fmt.Errorf("--modes: unknown mode %q (known: %s)", m, strings.Join(knownModes, ", ")))
		}
	}
	if err := os.Chdir(root); err != nil {
		fail(err)
	}
	dir, err := os.MkdirTemp("", "gpushare-bench-")
	if err != nil {
		fail(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	o.bin = dir
	if err := run(o); err != nil {
		_ = os.RemoveAll(dir)
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-scheduler:", err)
	os.Exit(1)
}

func run(o options) error {
	// As the images build them (hack/image): static, without symbols.
	// Stock kube-scheduler is built the same way (hack/cluster-tools.sh).
	// Linked against libc, with its symbol tables, gpushare-scheduler
	// took about 8 MiB more RSS at 5000 nodes, which no image has.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", o.bin+"/",
		"./cmd/gpushare-scheduler", "./cmd/gpushare-extender", "./test/bench/scheduler/nullextender")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building: %w", err)
	}
	tools, err := controlplane.FindTools("")
	if err != nil {
		return err
	}
	var results []Result
	for _, n := range o.nodes {
		// Interleaved, each round in the order of the one before
		// reversed (a, b, c, c, b, a, a, ...), so that a slow spell on a
		// shared machine hits every mode alike, and a drift within the
		// rounds favours no mode by its place in them.
		runs := map[string][]Result{}
		for round := range max(o.repeat, 1) {
			for _, m := range roundOrder(o.modes, round) {
				r, err := runOne(o, tools, m, n)
				if err != nil {
					return fmt.Errorf("%s at %d nodes: %w", m, n, err)
				}
				runs[m] = append(runs[m], r)
				if o.json {
					b, _ := json.Marshal(r)
					fmt.Println(string(b))
				}
			}
		}
		for _, m := range o.modes {
			results = append(results, median(runs[m]))
		}
	}
	if !o.json {
		printTable(results)
	}
	return nil
}

// roundOrder returns the order of the modes in round (from 0): as given
// in even rounds, reversed in odd ones.
func roundOrder(modes []string, round int) []string {
	if round%2 == 0 {
		return modes
	}
	r := slices.Clone(modes)
	slices.Reverse(r)
	return r
}

// median returns the run with the median throughput.
func median(rs []Result) Result {
	slices.SortFunc(rs, func(a, b Result) int { return cmp.Compare(a.PodsPerSecond, b.PodsPerSecond) })
	return rs[len(rs)/2]
}

func printTable(results []Result) {
	fmt.Printf("%-14s %6s %6s %9s %12s %8s %8s %9s %10s\n", "mode", "nodes", "pods", "pods/s", "median/s", "seconds", "RSS MiB", "peak MiB", "vs stock")
	for _, r := range results {
		ratio := ""
		for _, s := range results {
			if s.Mode == baseline(r.Mode) && s.Nodes == r.Nodes && s.PodsPerSecond > 0 {
				ratio = fmt.Sprintf("%.2f", r.PodsPerSecond/s.PodsPerSecond)
			}
		}
		fmt.Printf("%-14s %6d %6d %9.1f %12.1f %8.1f %8.0f %9.0f %10s\n", r.Mode, r.Nodes, r.Pods, r.PodsPerSecond,
			r.MedianPerSecond, r.Seconds, r.RSSMiB, r.PeakRSSMiB, ratio)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func runOne(o options, tools controlplane.Tools, mode string, nodes int) (Result, error) {
	ctx := context.Background()
	progress("%s, %d nodes: starting the control plane", mode, nodes)
	c, err := controlplane.Start(ctx, controlplane.Options{Tools: tools, NoKwok: true, QPS: 2000, Burst: 4000,
		ControllerManagerArgs: []string{"--controllers=*,-node-lifecycle-controller"}})
	if err != nil {
		return Result{}, err
	}
	defer c.Stop()
	client, err := c.Client()
	if err != nil {
		return Result{}, err
	}
	progress("creating %d nodes", nodes)
	err = controlplane.Parallel(ctx, nodes, func(i int) error {
		s := controlplane.NodeSpec{Name: fmt.Sprintf("node-%05d", i), Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: gpuMiB, Count: 8}
		if isStock(mode) {
			s.Extended = map[corev1.ResourceName]int64{stockResource: 8 * gpuMiB}
		}
		if err := controlplane.CreateNode(ctx, client, s); err != nil {
			return err
		}
		return controlplane.MarkSchedulable(ctx, client, s.Name)
	})
	if err != nil {
		return Result{}, err
	}
	if isDRA(mode) {
		progress("publishing %d nodes' GPUs as DRA devices", nodes)
		if err := createDeviceClass(ctx, client); err != nil {
			return Result{}, err
		}
		err := controlplane.Parallel(ctx, nodes, func(i int) error {
			return createSlice(ctx, client, controlplane.NodeSpec{Name: fmt.Sprintf("node-%05d", i), Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: gpuMiB, Count: 8})
		})
		if err != nil {
			return Result{}, err
		}
	}
	progress("creating %d pods", o.pods)
	resourceName := corev1.ResourceName("gpushare.io/gpu-mem")
	if isStock(mode) {
		resourceName = stockResource
	}
	sizes := []int64{2048, 4096, 8192, 10240, 20480}
	rng := rand.New(rand.NewPCG(42, uint64(o.pods)))
	mib := make([]int64, o.pods)
	for i := range mib {
		mib[i] = sizes[rng.IntN(len(sizes))]
	}
	err = controlplane.Parallel(ctx, o.pods, func(i int) error {
		if isDRA(mode) {
			return createClaimPod(ctx, client, i, mib[i])
		}
		pod := benchPod(i, resourceName, mib[i])
		if mode == "stock-record" {
			record, err := recordLike(nodes, mib[i])
			if err != nil {
				return err
			}
			pod.Annotations = map[string]string{recordAnnotation: record}
		}
		_, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return Result{}, err
	}

	binds := newBindWatch(client, o.pods)
	defer binds.stop()
	before := cpuTimes(c.Processes())
	atFirst := make(chan map[string]time.Duration, 1)
	go func() {
		select {
		case <-binds.first:
			atFirst <- cpuTimes(c.Processes())
		case <-binds.quit:
		}
	}()
	procs, urls, err := startScheduler(ctx, c, o, mode)
	if err != nil {
		return Result{}, err
	}
	// urls are the scheduler's, then the extender's.
	profilePath := func(i int, suffix string) string {
		name := []string{mode, "extender-server"}[i]
		return filepath.Join(o.profile, fmt.Sprintf("%s-%d%s.pprof", name, nodes, suffix))
	}
	metricsPath := func(i int, suffix string) string {
		return strings.TrimSuffix(profilePath(i, suffix), ".pprof") + ".metrics"
	}
	apiserverPath := func(suffix string) string {
		return filepath.Join(o.profile, fmt.Sprintf("%s-%d-apiserver%s", mode, nodes, suffix))
	}
	if o.profile != "" {
		for i, url := range urls {
			go func() {
				profile(c, url+"/debug/pprof/profile?seconds=20", profilePath(i, ""), i == 1)
				// Then, mid-run, the heap as of the last collection
				// and the runtime's memory figures: the peak that RSS
				// keeps is reached while pods are scheduled.
				profile(c, url+"/debug/pprof/heap", profilePath(i, "-heap-20s"), i == 1)
				profile(c, url+"/metrics", metricsPath(i, "-20s"), i == 1)
			}()
		}
		// The apiserver too, over the same 20 s, and the requests it
		// served per verb and resource from here to the last bind.
		go profile(c, c.Host+"/debug/pprof/profile?seconds=20", apiserverPath(".pprof"), false)
		profile(c, c.Host+"/metrics", apiserverPath("-before.metrics"), false)
	}
	progress("%s is running; waiting for %d pods to be bound", mode, o.pods)
	if err := binds.wait(o.timeout); err != nil {
		return Result{}, err
	}
	r := Result{Mode: mode, Nodes: nodes, Pods: o.pods, CPUPerPod: map[string]float64{}, BindCPUPerPod: map[string]float64{}}
	r.Seconds, r.PodsPerSecond, r.MedianPerSecond = binds.rates()
	first := <-atFirst
	for name, t := range cpuTimes(c.Processes()) {
		r.CPUPerPod[name] = float64((t-before[name])/time.Millisecond) / float64(o.pods)
		if o.pods > 1 {
			r.BindCPUPerPod[name] = math.Round(float64((t-first[name])/time.Microsecond)/float64(o.pods-1)) / 1000
		}
	}
	for _, p := range procs {
		rss, peak, file, err := memory(p.Cmd.Process.Pid)
		if err != nil {
			return Result{}, err
		}
		r.RSSMiB += rss
		r.PeakRSSMiB += peak
		r.FileRSSMiB += file
	}
	// After RSS: the heap profile collects garbage first. Each
	// scheduler's own metrics, before that, hold its Go runtime's view
	// of the memory RSS measured (go_memstats_*).
	if o.profile != "" {
		profile(c, c.Host+"/metrics", apiserverPath("-after.metrics"), false)
		for i, url := range urls {
			profile(c, url+"/metrics", metricsPath(i, ""), i == 1)
			profile(c, url+"/debug/pprof/heap?gc=1", profilePath(i, "-heap"), i == 1)
		}
	}
	// After RSS and the profiles' metrics: a scrape of
	// gpushare-scheduler's metrics allocates tens of MB at 5000 nodes
	// (docs/benchmarks.md).
	if b, err := get(c, urls[0]+"/metrics", false); err == nil {
		r.AlgorithmMs, _ = histogramMeanMs(b, "scheduler_scheduling_algorithm_duration_seconds")
	} else {
		progress("reading the scheduler's metrics: %v", err)
	}
	if mode == "extender" {
		if b, err := get(c, urls[1]+"/metrics", true); err == nil {
			r.ExtenderFilterMs, _ = histogramMeanMs(b, "gpushare_extender_request_duration_seconds", `verb="filter"`)
		} else {
			progress("reading the extender's metrics: %v", err)
		}
	}
	filter := ""
	if r.ExtenderFilterMs > 0 {
		filter = fmt.Sprintf(", the extender serving its filter call %.2f", r.ExtenderFilterMs)
	}
	progress("%s, %d nodes: %.1f pods/s, RSS %.0f MiB, CPU ms per pod %s; from the first bind %s; scheduling algorithm %.2f ms per pod%s",
		mode, nodes, r.PodsPerSecond, r.RSSMiB, cpuLine(r.CPUPerPod), cpuLine(r.BindCPUPerPod), r.AlgorithmMs, filter)
	return r, nil
}

// isStock says whether mode runs stock kube-scheduler on the plain
// extended resource.
func isStock(mode string) bool { return mode == "stock" || mode == "stock-record" }

// recordAnnotation holds stock-record's stand-in for gpushare's record:
// a name two bytes longer than gpushare.io/allocation, which no
// component reads.
const recordAnnotation = "bench.gpushare.io/record"

// recordLike is an allocation record as long as the one gpushare-scheduler
// writes for a pod of mib on one of nodes' GPUs: the same fields, a node
// name and GPU UUID as long as the bench's.
func recordLike(nodes int, mib int64) (string, error) {
	node := fmt.Sprintf("node-%05d", nodes-1)
	return gpusharev1.Marshal(&gpusharev1.Allocation{Node: node, Containers: []gpusharev1.ContainerAllocation{{
		Name: "main", Kind: gpusharev1.ContainerApp,
		GPUs: []gpusharev1.GPUShare{{Index: 7, UUID: fmt.Sprintf("GPU-%s-%d", node, 7), MemoryMiB: mib}},
	}}, Asked: &gpusharev1.Asked{}})
}

// benchPod is pod i asking mib of resource name; none if name is "".
func benchPod(i int, name corev1.ResourceName, mib int64) *corev1.Pod {
	var limits corev1.ResourceList
	if name != "" {
		limits = corev1.ResourceList{name: *k8sresource.NewQuantity(mib, k8sresource.DecimalSI)}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{
					corev1.ResourceCPU:    k8sresource.MustParse("100m"),
					corev1.ResourceMemory: k8sresource.MustParse("128Mi"),
				},
				Limits: limits,
			}}}},
	}
}

// startScheduler starts mode's scheduler (and extender) with the bench's
// client rate limit and returns the processes to measure and the URLs to
// profile (the scheduler's, then the extender's).
func startScheduler(ctx context.Context, c *controlplane.Cluster, o options, mode string) ([]*controlplane.Process, []string, error) {
	limit := func(config []byte) []byte {
		config = bytes.Replace(config, []byte("qps: 200"), []byte("qps: "+strconv.Itoa(o.qps)), 1)
		return bytes.Replace(config, []byte("burst: 400"), []byte("burst: "+strconv.Itoa(o.qps)), 1)
	}
	read := func(path string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if !bytes.Contains(b, []byte("qps: 200")) || !bytes.Contains(b, []byte("burst: 400")) {
			return nil, fmt.Errorf("%s: expected clientConnection qps: 200 and burst: 400 to replace", path)
		}
		return limit(b), nil
	}
	switch mode {
	case "gpushare", "gpushare-watch", "dra":
		config, err := read("deploy/scheduler-config.yaml")
		if err != nil {
			return nil, nil, err
		}
		kubeconfig, err := account(ctx, c, "scheduler")
		if err != nil {
			return nil, nil, err
		}
		s, err := c.StartSchedulerAs(ctx, "gpushare-scheduler", filepath.Join(o.bin, "gpushare-scheduler"), kubeconfig, config, "--v=1")
		if err != nil {
			return nil, nil, err
		}
		if mode == "gpushare-watch" {
			// An extender no scheduler calls, on plain HTTP: its
			// informers watch the cluster as a serving one's do.
			ext, _, err := startExtender(ctx, c, o, "--insecure-serve-unauthenticated")
			if err != nil {
				return nil, nil, err
			}
			return []*controlplane.Process{s.Process, ext}, []string{s.URL}, nil
		}
		return []*controlplane.Process{s.Process}, []string{s.URL}, nil
	case "stock", "stock-record", "dra-stock":
		s, err := c.StartScheduler(ctx, "kube-scheduler", c.Tools.Bin("kube-scheduler"), controlplane.StockSchedulerConfig(o.qps), "--v=1")
		if err != nil {
			return nil, nil, err
		}
		return []*controlplane.Process{s.Process}, []string{s.URL}, nil
	default:
		// Mutual TLS, as deployed: a CA for this run issues the
		// extender's serving certificate and kube-scheduler's client one.
		tlsDir := filepath.Join(c.Dir, "gpushare-extender")
		ca, err := controlplane.NewCA("gpushare-bench-ca")
		if err != nil {
			return nil, nil, err
		}
		if err := os.MkdirAll(tlsDir, 0o700); err != nil {
			return nil, nil, err
		}
		caFile := filepath.Join(tlsDir, "ca.crt")
		if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
			return nil, nil, err
		}
		cert, key, err := ca.IssueFiles(tlsDir, "extender", "gpushare-extender", "127.0.0.1")
		if err != nil {
			return nil, nil, err
		}
		if _, _, err := ca.IssueFiles(tlsDir, "scheduler", "kube-scheduler"); err != nil {
			return nil, nil, err
		}
		tlsFlags := []string{"--tls-cert-file=" + cert, "--tls-private-key-file=" + key, "--client-ca-file=" + caFile}
		var ext *controlplane.Process
		var port int
		switch mode {
		case "extender-null":
			ext, port, err = startNullExtender(ctx, c, o, tlsFlags)
		case "extender-floor":
			ext, port, err = startNullExtender(ctx, c, o, append(tlsFlags, "--follow", "--record"))
		default:
			ext, port, err = startExtender(ctx, c, o, append(append(tlsFlags,
				"--profiling="+strconv.FormatBool(o.profile != "")), o.extenderFlags...)...)
		}
		if err != nil {
			return nil, nil, err
		}
		base := "https://127.0.0.1:" + strconv.Itoa(port)
		config, err := read("deploy/extender-scheduler-config.yaml")
		if err != nil {
			return nil, nil, err
		}
		config = bytes.ReplaceAll(config, []byte("https://127.0.0.1:8888"), []byte(base))
		config = bytes.ReplaceAll(config, []byte("/etc/kubernetes/gpushare-extender/"), []byte(tlsDir+"/"))
		s, err := c.StartScheduler(ctx, "kube-scheduler", c.Tools.Bin("kube-scheduler"), config, "--v=1")
		if err != nil {
			return nil, nil, err
		}
		return []*controlplane.Process{s.Process, ext}, []string{s.URL, base}, nil
	}
}

// startExtender starts gpushare-extender on loopback with the bench's
// client rate limit, flags added, and returns it once healthy, with the
// port it serves the verbs on.
func startExtender(ctx context.Context, c *controlplane.Cluster, o options, flags ...string) (*controlplane.Process, int, error) {
	return startExtenderBinary(ctx, c, "gpushare-extender", filepath.Join(o.bin, "gpushare-extender"), func(kubeconfig string, port, health int) []string {
		return append([]string{"--kubeconfig=" + kubeconfig,
			"--bind-address=127.0.0.1", "--port=" + strconv.Itoa(port), "--healthz-port=" + strconv.Itoa(health),
			"--config=deploy/extender-config.yaml",
			"--kube-api-qps=" + strconv.Itoa(o.qps), "--kube-api-burst=" + strconv.Itoa(o.qps), "-v=1"}, flags...)
	})
}

// startNullExtender starts test/bench/scheduler/nullextender on loopback
// with the bench's client rate limit and flags (TLS, --follow,
// --record), and returns it once healthy, with the port it serves the
// verbs on.
func startNullExtender(ctx context.Context, c *controlplane.Cluster, o options, flags []string) (*controlplane.Process, int, error) {
	return startExtenderBinary(ctx, c, "null-extender", filepath.Join(o.bin, "nullextender"), func(kubeconfig string, port, health int) []string {
		return append([]string{"--kubeconfig=" + kubeconfig, "--port=" + strconv.Itoa(port),
			"--healthz-port=" + strconv.Itoa(health), "--kube-api-qps=" + strconv.Itoa(o.qps)}, flags...)
	})
}

// startExtenderBinary runs path as the process name, with the arguments
// args makes of a kubeconfig of the extender's service account, a free
// port for the verbs and one for a plain /healthz, and returns it once
// healthy, with the verbs' port.
func startExtenderBinary(ctx context.Context, c *controlplane.Cluster, name, path string,
	args func(kubeconfig string, port, health int) []string) (*controlplane.Process, int, error) {
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, 0, err
	}
	health, err := controlplane.FreePort()
	if err != nil {
		return nil, 0, err
	}
	kubeconfig, err := account(ctx, c, "extender")
	if err != nil {
		return nil, 0, err
	}
	ext, err := c.Run(name, path, args(kubeconfig, port, health)...)
	if err != nil {
		return nil, 0, err
	}
	if err := controlplane.WaitHTTP(ctx, ext, "http://127.0.0.1:"+strconv.Itoa(health)+"/healthz", ""); err != nil {
		return nil, 0, err
	}
	return ext, port, nil
}

// profile saves the profile a scheduler serves at url (its pprof
// handler's) to path. The extender asks for a client certificate: it gets
// kube-scheduler's.
func profile(c *controlplane.Cluster, url, path string, extender bool) {
	b, err := get(c, url, extender)
	if err == nil {
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		progress("profile: %v", err)
	}
}

// get returns what a scheduler serves at url.
func get(c *controlplane.Cluster, url string, extender bool) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	config := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback test scheduler
	if extender {
		dir := filepath.Join(c.Dir, "gpushare-extender")
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "scheduler.crt"), filepath.Join(dir, "scheduler.key"))
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{cert}
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: config}}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, b)
	}
	return b, err
}

// histogramMeanMs returns, in ms, the mean of the histogram name in the
// Prometheus text exposition b, over the series whose labels hold every
// one of match: its _sum over its _count.
func histogramMeanMs(b []byte, name string, match ...string) (float64, bool) {
	var sum, count float64
	for line := range strings.Lines(string(b)) {
		rest, isSum := strings.CutPrefix(line, name+"_sum")
		if !isSum {
			var isCount bool
			if rest, isCount = strings.CutPrefix(line, name+"_count"); !isCount {
				continue
			}
		}
		labels, value, ok := strings.Cut(strings.TrimSpace(rest), " ")
		if !ok {
			labels, value = "", labels
		}
		if !strings.HasPrefix(labels, "{") && labels != "" {
			continue // another metric whose name starts with this one's
		}
		if slices.ContainsFunc(match, func(m string) bool { return !strings.Contains(labels, m) }) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		if isSum {
			sum += v
		} else {
			count += v
		}
	}
	if count == 0 {
		return 0, false
	}
	return 1000 * sum / count, true
}

// bindWatch records when each pod is first seen bound.
type bindWatch struct {
	want  int
	mu    sync.Mutex
	times map[string]time.Time
	done  chan struct{}
	// first is closed at the first bind.
	first chan struct{}
	quit  chan struct{}
}

func newBindWatch(client kubernetes.Interface, want int) *bindWatch {
	w := &bindWatch{want: want, times: make(map[string]time.Time, want),
		done: make(chan struct{}), first: make(chan struct{}), quit: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.times[p.Name]; ok {
			return
		}
		w.times[p.Name] = time.Now()
		if len(w.times) == 1 {
			close(w.first)
		}
		if len(w.times) == w.want {
			close(w.done)
		}
	}
	_, _ = f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) },
	})
	f.Start(w.quit)
	return w
}

func (w *bindWatch) stop() { close(w.quit) }

func (w *bindWatch) wait(timeout time.Duration) error {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		select {
		case <-w.done:
			return nil
		case <-tick.C:
			w.mu.Lock()
			progress("%d of %d bound", len(w.times), w.want)
			w.mu.Unlock()
		case <-deadline:
			w.mu.Lock()
			defer w.mu.Unlock()
			return fmt.Errorf("only %d of %d pods bound after %v", len(w.times), w.want, timeout)
		}
	}
}

// rates returns the seconds from the first bind to the last, the pods per
// second over that span, and the median of the per-second bind counts.
func (w *bindWatch) rates() (seconds, perSecond, median float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ts := make([]time.Time, 0, len(w.times))
	for _, t := range w.times {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	if len(ts) < 2 {
		return 0, 0, 0
	}
	span := ts[len(ts)-1].Sub(ts[0]).Seconds()
	buckets := make([]float64, int(span)+1)
	for _, t := range ts {
		buckets[int(t.Sub(ts[0]).Seconds())]++
	}
	// The last second is partial.
	if len(buckets) > 1 {
		buckets = buckets[:len(buckets)-1]
	}
	slices.Sort(buckets)
	return span, float64(len(ts)) / span, buckets[len(buckets)/2]
}

// cpuLine formats CPU ms per pod by process, in name order.
func cpuLine(cpu map[string]float64) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(cpu)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, cpu[name]))
	}
	return strings.Join(parts, ", ")
}

// cpuTimes returns each running process's CPU time (user and system)
// by name; the clock ticks of /proc are 1/100 s.
func cpuTimes(procs []*controlplane.Process) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range procs {
		if p.Cmd.Process == nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Cmd.Process.Pid))
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold spaces: fields
		// count from after it (utime and stime are fields 14 and 15).
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		utime, err1 := strconv.ParseInt(f[11], 10, 64)
		stime, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 == nil && err2 == nil {
			out[p.Name] += time.Duration(utime+stime) * 10 * time.Millisecond
		}
	}
	return out
}

// memory returns a process's resident and peak resident memory in MiB,
// and the part of the resident memory that maps files.
func memory(pid int) (rss, peak, file float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kib, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss = kib / 1024
		case "VmHWM:":
			peak = kib / 1024
		case "RssFile:":
			file = kib / 1024
		}
	}
	if rss == 0 {
		return 0, 0, 0, errors.New("no VmRSS in /proc status")
	}
	return rss, peak, file, nil
}

// account returns a kubeconfig of kube-system/gpushare-<component> with
// the roles of deploy/<component>-rbac.yaml: the benchmark runs gpushare
// with the privileges the chart gives it.
func account(ctx context.Context, c *controlplane.Cluster, component string) (string, error) {
	rbac, err := os.ReadFile("deploy/" + component + "-rbac.yaml")
	if err != nil {
		return "", err
	}
	return c.RoleKubeconfig(ctx, rbac, "kube-system", "gpushare-"+component, 24*time.Hour)
}
