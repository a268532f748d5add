package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/controlplane"
	gpurecord "github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

const (
	// soakShort is the soak's length in `make test`; GPUSHARE_SOAK
	// (a Go duration: `make soak` sets 30m) sets another.
	soakShort = 100 * time.Second
	// soakPodsPerSecond is the rate pods are created at: about 10,000 in
	// 30 minutes.
	soakPodsPerSecond = 6
	// soakFull is the share of the GPUs (the larger of memory and
	// compute booked, averaged over GPUs) above which bound pods are
	// deleted at random.
	soakFull = 0.8
	// soakFitGrace is how long a pod may stay Pending while it fits.
	soakFitGrace = 30 * time.Second
	// soakPendingMax is how long a Pending pod that does not fit is kept
	// before it is deleted, so that the queue stays bounded.
	soakPendingMax = 60 * time.Second
	// soakDaemons nodes run gpushare-node (simulated GPUs); the others
	// carry their inventory as created.
	soakDaemons = 3
	// soakDaemonGrace is how long after a node daemon is started again
	// its node is left out of the fit judgment: its lease is renewed and
	// the scheduler retries the pods it turned away.
	soakDaemonGrace = 10 * time.Second
)

// soakResult is the soak's one JSON line.
type soakResult struct {
	Seconds            float64 `json:"seconds"`
	Nodes              int     `json:"nodes"`
	PodsCreated        int     `json:"pods_created"`
	PodsBound          int     `json:"pods_bound"`
	PodsPerS           float64 `json:"pods_per_s"`
	OvercommittedGPUs  int     `json:"overcommitted_gpus"`
	BoundWithoutRecord int     `json:"bound_without_record"`
	FitButPending30s   int     `json:"fit_but_pending_30s"`
	MetricsMismatch    int     `json:"metrics_mismatch"`
	MetricsChecks      int     `json:"metrics_checks"`
	MaxPendingS        float64 `json:"max_pending_s"`
	SchedulerKills     int     `json:"scheduler_kills"`
	DaemonKills        int     `json:"daemon_kills"`
	APIServerRestarts  int     `json:"apiserver_restarts"`
}

// soakDaemon is a node whose GPUs a gpushare-node publishes.
type soakDaemon struct {
	node, kubeconfig, simFile string
	proc                      *controlplane.Process
	starts                    int
	// down is when it was killed (zero while it runs), up when it was
	// last started.
	down, up time.Time
}

// soakSnapshot is what the records say at one moment.
type soakSnapshot struct {
	states map[string]*alloc.NodeState
	// over names the GPUs (node/index) the records book beyond capacity.
	over []string
	// noRecord names the soak's pods bound without a record.
	noRecord []string
	// bound and pending are the soak's pods (pending: not bound, with
	// or without a record).
	bound, pending []*corev1.Pod
	// bookedMiB is the GPU memory the bound pods' records book (the
	// records of pods not bound yet book nothing), and
	// fullness the GPUs' mean booked share.
	bookedMiB int64
	fullness  float64
}

// TestSoak: pods of mixed GPU shapes are created (6 a second) and deleted
// (bound ones at random, keeping the GPUs about 80% booked) for
// GPUSHARE_SOAK (100 s unless set) on 50 kwok nodes, 3 of them run by
// gpushare-node, while gpushare-scheduler is killed with SIGKILL every
// 30-60 s and started again (a 4 s lease, as a standby would take it),
// node daemons are killed and started again, and kube-apiserver restarts
// once, halfway. Every 2 s, from the records (the allocation annotations):
// no GPU is over capacity, no pod is bound without a record, and no pod
// stays Pending while it fits some live node's GPUs by the records for
// longer than 30 s; every 30 s creating and deleting pause until the
// scheduler's gpushare_gpu_memory_booked_bytes equals what the bound pods'
// records book (20 s at most), and once more at the end. It logs one JSON
// line with the counts.
func TestSoak(t *testing.T) {
	duration := soakShort
	if v := os.Getenv("GPUSHARE_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("GPUSHARE_SOAK=%q: %v", v, err)
		}
		duration = d
	}
	ctx := context.Background()
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.Apply(ctx, client, readFile(t, "deploy/node-rbac.yaml")); err != nil {
		t.Fatal(err)
	}

	// 50 nodes, 200 GPUs; the first three T4 nodes get their GPUs from
	// a node daemon.
	specs := concurrencyNodes()
	var daemons []*soakDaemon
	dir := t.TempDir()
	for i := range soakDaemons {
		s := specs[i]
		d := &soakDaemon{node: s.Name, simFile: filepath.Join(dir, s.Name+".yaml")}
		if err := os.WriteFile(d.simFile, []byte(s.SimulatedGPUs()), 0o600); err != nil {
			t.Fatal(err)
		}
		specs[i].Bare = true
		daemons = append(daemons, d)
	}
	createNodes(t, client, specs...)
	var capacityMiB int64
	for _, s := range specs {
		capacityMiB += s.MemoryMiB * int64(s.Count)
	}
	bin := nodeBin(t)
	startDaemon := func(d *soakDaemon) {
		t.Helper()
		d.starts++
		p, err := c.Run(fmt.Sprintf("gpushare-node-%s-%d", d.node, d.starts), bin, "--kubeconfig="+d.kubeconfig,
			"--node-name="+d.node, "--simulated-gpus="+d.simFile, "--no-device-plugin", "--metrics-bind-address=",
			"--lease-duration=4s", "-v=2")
		if err != nil {
			t.Fatal(err)
		}
		d.proc, d.down, d.up = p, time.Time{}, time.Now()
	}
	for _, d := range daemons {
		if d.kubeconfig, err = c.NodeDaemonKubeconfig(ctx, d.node, duration+time.Hour); err != nil {
			t.Fatal(err)
		}
		startDaemon(d)
	}

	config := failoverConfig(t)
	kubeconfig := accountKubeconfig(t, c, "scheduler")
	var (
		sched    *controlplane.Scheduler
		schedSeq int
		// restarting is when kube-apiserver was killed for its restart
		// and when it was ready again.
		restarting [2]time.Time
	)
	startScheduler := func() {
		t.Helper()
		schedSeq++
		s, err := c.StartSchedulerAs(ctx, fmt.Sprintf("gpushare-scheduler-%d", schedSeq), schedulerBin, kubeconfig, config)
		if err != nil {
			t.Fatal(err)
		}
		soakNotForbidden(t, s.Process, &restarting)
		sched = s
	}
	startScheduler()
	// Every GPU is known to the scheduler, the daemons' included.
	if err := waitFor(time.Minute, func() (bool, error) {
		v, err := metricSum(scrape(t, sched.URL+"/metrics"), "gpushare_gpu_memory_capacity_bytes", nil)
		return err == nil && int64(v) == capacityMiB<<20, nil
	}); err != nil {
		t.Fatalf("the scheduler never held the %d MiB of the nodes' GPUs: %v", capacityMiB, err)
	}

	model, placer := fitChecker(t)
	rng := rand.New(rand.NewPCG(21, uint64(duration)))
	res := soakResult{Nodes: len(specs)}
	var (
		over, noRecord = map[string]bool{}, map[string]bool{}
		bound          = map[string]bool{}
		lateFit        = newFitWatch(model, placer, soakFitGrace)
		// created is when each pod was created, and maxPending the
		// longest a pod was seen Pending, fitting or not.
		created    = map[string]time.Time{}
		maxPending time.Duration
	)
	// check takes a snapshot and counts what it finds; nil while the
	// apiserver cannot be reached.
	check := func(now time.Time) *soakSnapshot {
		snap, err := soakSnap(ctx, client)
		if err != nil {
			t.Logf("snapshot: %v", err)
			return nil
		}
		for _, g := range snap.over {
			if !over[g] {
				t.Errorf("GPU %s is booked beyond its capacity by the records", g)
			}
			over[g] = true
		}
		for _, p := range snap.noRecord {
			if !noRecord[p] {
				t.Errorf("pod %s is bound without an allocation record", p)
			}
			noRecord[p] = true
		}
		for _, p := range snap.bound {
			bound[p.Name] = true
		}
		// A node whose daemon is down, or just back, is not judged.
		live := map[string]*alloc.NodeState{}
		for name, s := range snap.states {
			live[name] = s
		}
		for _, d := range daemons {
			if !d.down.IsZero() || now.Sub(d.up) < soakDaemonGrace {
				delete(live, d.node)
			}
		}
		for _, p := range snap.pending {
			if at, ok := created[p.Name]; ok {
				maxPending = max(maxPending, now.Sub(at))
			}
		}
		late, err := lateFit.observe(now, snap.pending, live)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range late {
			t.Errorf("pod %s has been Pending for %v while it fits (now on node %s) by the records", l.pod, l.pending.Round(time.Second), l.node)
		}
		return snap
	}
	// metricsAgree waits until the scheduler's booked memory equals the
	// bound pods' records, 20 s at most, while nothing is created or
	// deleted.
	metricsAgree := func() {
		t.Helper()
		res.MetricsChecks++
		var metric float64
		var recorded int64
		err := waitFor(20*time.Second, func() (bool, error) {
			snap, err := soakSnap(ctx, client)
			if err != nil {
				return false, nil
			}
			recorded = snap.bookedMiB
			metric, err = metricSum(scrape(t, sched.URL+"/metrics"), "gpushare_gpu_memory_booked_bytes", nil)
			return err == nil && int64(metric) == recorded<<20, nil
		})
		if err != nil {
			res.MetricsMismatch++
			t.Errorf("%s: gpushare_gpu_memory_booked_bytes sums to %.0f; the bound pods' records book %d MiB (%d bytes)",
				sched.Name, metric, recorded, recorded<<20)
		}
	}

	var (
		start       = time.Now()
		end         = start.Add(duration)
		nextKill    = start.Add(time.Duration(30+rng.IntN(31)) * time.Second)
		nextDaemon  = start.Add(15 * time.Second)
		restartAt   = start.Add(duration / 2)
		nextMetrics = start.Add(30 * time.Second)
		snap        *soakSnapshot
		tick        = time.NewTicker(time.Second)
		seq         int
	)
	defer tick.Stop()
	for now := time.Now(); now.Before(end); now = <-tick.C {
		if now.After(nextKill) {
			sched.Kill()
			res.SchedulerKills++
			t.Logf("%v: killed %s (SIGKILL)", now.Sub(start).Round(time.Second), sched.Name)
			startScheduler()
			nextKill = time.Now().Add(time.Duration(30+rng.IntN(31)) * time.Second)
		}
		for _, d := range daemons {
			if !d.down.IsZero() && now.Sub(d.down) >= 8*time.Second {
				startDaemon(d)
			}
		}
		if now.After(nextDaemon) {
			d := daemons[rng.IntN(len(daemons))]
			if d.down.IsZero() {
				d.proc.Kill()
				d.down = now
				res.DaemonKills++
			}
			nextDaemon = now.Add(time.Duration(15+rng.IntN(11)) * time.Second)
		}
		if res.APIServerRestarts == 0 && now.After(restartAt) {
			t0 := time.Now()
			restarting[0] = t0
			if err := c.RestartAPIServer(ctx); err != nil {
				t.Fatalf("restarting kube-apiserver: %v", err)
			}
			restarting[1] = time.Now()
			res.APIServerRestarts++
			// Pods were not retried while the apiserver was down.
			lateFit.restart()
			t.Logf("%v: kube-apiserver restarted in %v", now.Sub(start).Round(time.Second), time.Since(t0).Round(100*time.Millisecond))
		}
		if now.After(nextMetrics) {
			metricsAgree()
			nextMetrics = time.Now().Add(30 * time.Second)
		}

		if seq%2 == 0 {
			snap = check(time.Now())
		}
		seq++
		// Create this second's pods, then delete what is over.
		pods := mixedPods(soakPodsPerSecond, uint64(seq), fmt.Sprintf("soak-%05d", seq), "soak")
		for _, p := range pods {
			created[p.Name] = time.Now()
		}
		res.PodsCreated += soakDo(pods, func(p *corev1.Pod) error {
			_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err
		})
		if snap == nil {
			continue
		}
		var doomed []*corev1.Pod
		for _, p := range snap.pending {
			if time.Since(created[p.Name]) > soakPendingMax && !lateFit.fits(p.Name) {
				doomed = append(doomed, p)
			}
		}
		if snap.fullness > soakFull {
			// Each bound pod holds about fullness/len(bound) of it.
			n := int(float64(len(snap.bound)) * (snap.fullness - soakFull) / snap.fullness)
			for _, i := range rng.Perm(len(snap.bound))[:max(n, 1)] {
				doomed = append(doomed, snap.bound[i])
			}
		}
		soakDo(doomed, func(p *corev1.Pod) error {
			return client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
		for _, p := range doomed {
			delete(created, p.Name)
		}
		snap = nil
	}
	churn := time.Since(start)

	// The end: the last pods settle, the pods that fit bind within the
	// grace, and the metrics agree.
	waitSettled(t, client, "app=soak", 5*time.Second, 2*time.Minute)
	deadline := time.Now().Add(soakFitGrace + 5*time.Second)
	for {
		check(time.Now())
		if len(lateFit.since) == 0 || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	metricsAgree()

	res.Seconds = churn.Round(time.Second).Seconds()
	res.PodsBound = len(bound)
	res.PodsPerS = float64(int(float64(res.PodsBound)/churn.Seconds()*100)) / 100
	res.MaxPendingS = maxPending.Round(time.Second).Seconds()
	res.OvercommittedGPUs, res.BoundWithoutRecord, res.FitButPending30s = len(over), len(noRecord), len(lateFit.late)
	line, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", line)
	if res.SchedulerKills == 0 || res.DaemonKills == 0 || res.APIServerRestarts != 1 {
		t.Errorf("the soak killed the scheduler %d times and node daemons %d times and restarted kube-apiserver %d times; want each at least once",
			res.SchedulerKills, res.DaemonKills, res.APIServerRestarts)
	}
}

// soakRBACWarmup is how long after it is ready again a restarted
// kube-apiserver may still refuse requests its roles allow: it authorizes
// from RBAC informers that fill as it starts (seen: a lease update refused
// 40 ms into the new apiserver's life).
const soakRBACWarmup = 10 * time.Second

// soakNotForbidden is notForbidden, except for refusals from kube-apiserver
// logged between its kill (restarting[0]) and soakRBACWarmup after it was
// ready again (restarting[1]).
func soakNotForbidden(t *testing.T, p *controlplane.Process, restarting *[2]time.Time) {
	t.Cleanup(func() {
		for l := range strings.Lines(p.Tail(1 << 22)) {
			if !strings.Contains(l, "is forbidden: User") {
				continue
			}
			// klog's header: Lmmdd hh:mm:ss.uuuuuu
			if len(l) > 21 && !restarting[0].IsZero() {
				at, err := time.ParseInLocation("0102 15:04:05.000000", l[1:21], time.Local)
				if err == nil {
					at = at.AddDate(restarting[0].Year(), 0, 0)
					if !at.Before(restarting[0]) && at.Before(restarting[1].Add(soakRBACWarmup)) {
						continue
					}
				}
			}
			t.Errorf("%s was refused by RBAC: %s", p.Name, l)
		}
	})
}

// soakDo runs f on the pods from 8 goroutines and returns how many
// succeeded; errors (the apiserver restarting) are not the soak's
// concern.
func soakDo(pods []*corev1.Pod, f func(*corev1.Pod) error) int {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ok   int
		next = make(chan *corev1.Pod)
	)
	for range 8 {
		wg.Go(func() {
			for p := range next {
				if f(p) == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range pods {
		next <- p
	}
	close(next)
	wg.Wait()
	return ok
}

// soakSnap rebuilds every gpushare node's bookings from the pod records,
// as recompute does, but counts what is wrong instead of failing.
func soakSnap(ctx context.Context, client kubernetes.Interface) (*soakSnapshot, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	snap := &soakSnapshot{states: map[string]*alloc.NodeState{}}
	for i := range nodes.Items {
		n, err := gpurecord.NodeFrom(&nodes.Items[i])
		if err != nil {
			continue
		}
		snap.states[n.Name] = alloc.NewNodeState(n)
	}
	type gpuKey struct {
		node string
		gpu  int
	}
	use := map[gpuKey]alloc.Usage{}
	over := map[string]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		value, hasRecord := pod.Annotations[gpusharev1.AllocationAnnotation]
		soak := pod.Labels["app"] == "soak"
		switch {
		case gpucache.Ended(pod):
			continue
		case soak && pod.Spec.NodeName == "":
			snap.pending = append(snap.pending, pod)
		case soak && !hasRecord:
			snap.noRecord = append(snap.noRecord, pod.Name)
		case soak:
			snap.bound = append(snap.bound, pod)
		}
		// A record books once its pod is bound, as in the scheduler's
		// cache: before, it is a placement in flight.
		if !hasRecord || pod.Spec.NodeName == "" {
			continue
		}
		a, err := gpusharev1.ParseAllocation(value)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		s := snap.states[a.Node]
		if s == nil {
			return nil, fmt.Errorf("pod %s/%s is recorded on node %s, which has no GPUs", pod.Namespace, pod.Name, a.Node)
		}
		p, err := gpurecord.PlacementFrom(a, s.Node)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		for _, b := range p.Booked {
			k := gpuKey{a.Node, b.GPU}
			u := use[k]
			use[k] = alloc.Usage{MemoryMiB: u.MemoryMiB + b.MemoryMiB, Compute: u.Compute + b.Compute}
			snap.bookedMiB += b.MemoryMiB
		}
		if err := s.Apply(p); err != nil {
			for _, b := range p.Booked {
				over[fmt.Sprintf("%s/%d", a.Node, b.GPU)] = true
			}
		}
	}
	var share float64
	gpus := 0
	for _, s := range snap.states {
		for i := range s.Node.GPUs {
			g := &s.Node.GPUs[i]
			u := use[gpuKey{s.Node.Name, i}]
			if u.MemoryMiB > g.MemoryMiB || u.Compute > g.ComputeCapacity() {
				over[fmt.Sprintf("%s/%d", s.Node.Name, i)] = true
			}
			share += max(float64(u.MemoryMiB)/float64(g.MemoryMiB), float64(u.Compute)/float64(g.ComputeCapacity()))
			gpus++
		}
	}
	if gpus > 0 {
		snap.fullness = share / float64(gpus)
	}
	for g := range over {
		snap.over = append(snap.over, g)
	}
	return snap, nil
}

// fitWatch finds pods left Pending while they fit: a pod that fits some
// node by the records at every check for longer than grace is late, and
// reported once.
type fitWatch struct {
	model  *resource.Model
	placer *alloc.Placer
	grace  time.Duration
	// since is when each Pending pod was first seen fitting, since when
	// it has fitted at every check; late holds the pods reported.
	since map[string]time.Time
	late  map[string]bool
}

// latePod is a pod observe reports: Pending that long, fitting node.
type latePod struct {
	pod, node string
	pending   time.Duration
}

func newFitWatch(model *resource.Model, placer *alloc.Placer, grace time.Duration) *fitWatch {
	return &fitWatch{model: model, placer: placer, grace: grace, since: map[string]time.Time{}, late: map[string]bool{}}
}

// fits reports whether the pod fitted at the last check.
func (w *fitWatch) fits(pod string) bool { _, ok := w.since[pod]; return ok }

// restart forgets when pods began to fit: they were not retried while
// the apiserver was down.
func (w *fitWatch) restart() { clear(w.since) }

// observe judges the pending pods at now against the nodes' states
// (those of nodes not judged left out) and returns the pods late for the
// first time.
func (w *fitWatch) observe(now time.Time, pending []*corev1.Pod, nodes map[string]*alloc.NodeState) ([]latePod, error) {
	var out []latePod
	seen := map[string]bool{}
	names := slices.Sorted(maps.Keys(nodes))
	for _, p := range pending {
		seen[p.Name] = true
		req, err := w.model.PodRequest(p)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		fitsOn := ""
		for _, name := range names {
			if pl, _ := w.placer.Place(nodes[name], req); pl != nil {
				fitsOn = name
				break
			}
		}
		if fitsOn == "" {
			delete(w.since, p.Name)
			continue
		}
		since, ok := w.since[p.Name]
		if !ok {
			w.since[p.Name] = now
			continue
		}
		if now.Sub(since) > w.grace && !w.late[p.Name] {
			w.late[p.Name] = true
			out = append(out, latePod{pod: p.Name, node: fitsOn, pending: now.Sub(since)})
		}
	}
	for name := range w.since {
		if !seen[name] {
			delete(w.since, name)
		}
	}
	return out, nil
}

// TestFitWatch: the soak's check for pods left Pending while they fit
// reports a pod once, when it has fitted at every check for longer than
// the grace; a pod that stops fitting, or that the apiserver's restart
// could not retry, starts over; one that never fits is never late.
func TestFitWatch(t *testing.T) {
	t.Parallel()
	model, placer := fitChecker(t)
	spec := controlplane.NodeSpec{Name: "n1", Model: "NVIDIA A10", MemoryMiB: 16384, Count: 1}
	obj, err := spec.Node()
	if err != nil {
		t.Fatal(err)
	}
	node, err := gpurecord.NodeFrom(obj)
	if err != nil {
		t.Fatal(err)
	}
	free := map[string]*alloc.NodeState{"n1": alloc.NewNodeState(node)}
	full := map[string]*alloc.NodeState{"n1": alloc.NewNodeState(node)}
	full["n1"].GPUs[0] = alloc.Usage{MemoryMiB: 16384}
	pod := func(name string, mib int64) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
		l := corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(mib, k8sresource.DecimalSI)}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: l, Requests: l}
		return p
	}
	fits, huge := pod("fits", 4096), pod("huge", 32768)
	pending := []*corev1.Pod{fits, huge}

	w := newFitWatch(model, placer, 30*time.Second)
	t0 := time.Unix(1000, 0)
	step := func(at time.Duration, nodes map[string]*alloc.NodeState) []latePod {
		t.Helper()
		late, err := w.observe(t0.Add(at), pending, nodes)
		if err != nil {
			t.Fatal(err)
		}
		return late
	}
	want := func(at time.Duration, nodes map[string]*alloc.NodeState, names ...string) {
		t.Helper()
		var got []string
		for _, l := range step(at, nodes) {
			got = append(got, l.pod)
		}
		if !slices.Equal(got, names) {
			t.Errorf("at %v: late %v, want %v", at, got, names)
		}
	}
	want(0, free)
	want(20*time.Second, full) // stops fitting: starts over
	want(25*time.Second, free)
	want(50*time.Second, free)
	want(56*time.Second, free, "fits") // fitted from 25 s on: 31 s
	want(90*time.Second, free)         // reported once
	if !w.fits("fits") || w.fits("huge") || len(w.late) != 1 {
		t.Errorf("fits(fits) %v, fits(huge) %v, late %v; want true, false, one", w.fits("fits"), w.fits("huge"), w.late)
	}

	w = newFitWatch(model, placer, 30*time.Second)
	want(0, free)
	w.restart()
	want(20*time.Second, free)
	want(45*time.Second, free) // 25 s since the restart
	want(51*time.Second, free, "fits")
}
