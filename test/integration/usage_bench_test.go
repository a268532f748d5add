package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/lease"
)

// BenchmarkUsagePublishing5000 measures what 5,000 node daemons cost the
// control plane while they publish live GPU use, before and after the use
// moved from the Node to the daemon's Lease. This process publishes for
// every simulated node (8 GPUs each, use drifting a few points each
// sample, and one sample in 50 jumping by 25 points on a GPU, a job
// starting) against a real etcd and kube-apiserver, and renews each
// node's lease as the daemon does:
//
//   - before: every --usage-interval the Node's usage annotation is
//     patched (the code of inventory.Publisher.PublishUsage before the
//     move), and every --lease-duration/4 the lease is read and updated
//     (lease.Renewer before the move);
//   - after: the real lease.Renewer, its renewal carrying the latest
//     sample, written early only when a sample moved enough to matter;
//     the Node is not written.
//
// After a warm-up of one usage interval it measures a window and reports
// the apiserver's and etcd's CPU seconds over it (utime+stime from
// /proc/<pid>/stat), the watch events per minute a watcher of every Node
// and a watcher of kube-system's Leases receive, and the writes per minute
// the publishers made. GPUSHARE_USAGE_NODES, _WINDOW, _INTERVAL and _LEASE
// change the node count (5000), window (120s), usage interval (30s) and
// lease duration (40s). `make bench-usage` runs it.
func BenchmarkUsagePublishing5000(b *testing.B) {
	if skip != "" {
		b.Skip(skip)
	}
	nodes := envInt(b, "GPUSHARE_USAGE_NODES", 5000)
	window := envDuration(b, "GPUSHARE_USAGE_WINDOW", 2*time.Minute)
	interval := envDuration(b, "GPUSHARE_USAGE_INTERVAL", 30*time.Second)
	leaseFor := envDuration(b, "GPUSHARE_USAGE_LEASE", 40*time.Second)
	ctx := context.Background()
	// Without kwok nothing else writes the nodes; the node lifecycle
	// controller would taint them all.
	c, err := controlplane.Start(ctx, controlplane.Options{Tools: tools, NoKwok: true, QPS: 20000, Burst: 40000,
		ControllerManagerArgs: []string{"--controllers=*,-node-lifecycle-controller"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	client, err := c.Client()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	createBenchNodes(b, client, nodes)
	b.Logf("created %d nodes in %s", nodes, time.Since(start).Round(time.Second))
	pids := map[string]int{}
	for _, p := range c.Processes() {
		if p.Name == "kube-apiserver" || p.Name == "etcd" {
			pids[p.Name] = p.Cmd.Process.Pid
		}
	}

	results := map[string]usageResult{}
	for _, mode := range []string{"before", "after"} {
		b.Run(mode, func(b *testing.B) {
			r := measureUsage(b, client, pids, mode, nodes, interval, leaseFor, window)
			results[mode] = r
			b.ReportMetric(r.apiserverCPU, "apiserver-cpu-s")
			b.ReportMetric(r.etcdCPU, "etcd-cpu-s")
			b.ReportMetric(r.perMin(r.nodeEvents), "node-events/min")
			b.ReportMetric(r.perMin(r.leaseEvents), "lease-events/min")
			b.ReportMetric(r.perMin(r.nodeWrites), "node-writes/min")
			b.ReportMetric(r.perMin(r.leaseWrites), "lease-writes/min")
			b.ReportMetric(r.perMin(r.leaseReads), "lease-reads/min")
		})
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d nodes, usage every %s, lease %s, window %s\n", nodes, interval, leaseFor, window)
	fmt.Fprintf(&out, "%-28s %12s %12s\n", "", "before", "after")
	row := func(name string, f func(usageResult) float64) {
		fmt.Fprintf(&out, "%-28s %12.1f %12.1f\n", name, f(results["before"]), f(results["after"]))
	}
	row("apiserver CPU s", func(r usageResult) float64 { return r.apiserverCPU })
	row("etcd CPU s", func(r usageResult) float64 { return r.etcdCPU })
	row("Node watch events/min", func(r usageResult) float64 { return r.perMin(r.nodeEvents) })
	row("Lease watch events/min", func(r usageResult) float64 { return r.perMin(r.leaseEvents) })
	row("Node writes/min", func(r usageResult) float64 { return r.perMin(r.nodeWrites) })
	row("Lease writes/min", func(r usageResult) float64 { return r.perMin(r.leaseWrites) })
	row("Lease reads/min", func(r usageResult) float64 { return r.perMin(r.leaseReads) })
	row("Lease writes/min, renewals", func(usageResult) float64 { return float64(nodes) * 4 * time.Minute.Seconds() / leaseFor.Seconds() })
	row("failed requests", func(r usageResult) float64 { return float64(r.failed) })
	// On stdout, where `make bench-usage` shows it whatever -v says.
	fmt.Print(out.String())
}

type usageResult struct {
	window                                      time.Duration
	apiserverCPU, etcdCPU                       float64
	nodeEvents, leaseEvents                     int64
	nodeWrites, leaseWrites, leaseReads, failed int64
}

func (r usageResult) perMin(n int64) float64 { return float64(n) / r.window.Minutes() }

// usageCounters are what the publishers and watchers count, reset at the
// start of the window.
type usageCounters struct {
	nodeEvents, leaseEvents                     atomic.Int64
	nodeWrites, leaseWrites, leaseReads, failed atomic.Int64
}

func measureUsage(b *testing.B, client kubernetes.Interface, pids map[string]int, mode string,
	nodes int, interval, leaseFor, window time.Duration) usageResult {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var n usageCounters
	wg.Go(func() {
		countEvents(ctx, func(rv string) (watch.Interface, error) {
			return client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		}, &n.nodeEvents)
	})
	wg.Go(func() {
		countEvents(ctx, func(rv string) (watch.Interface, error) {
			return client.CoordinationV1().Leases(gpusharev1.LeaseNamespace).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		}, &n.leaseEvents)
	})
	for i := range nodes {
		node := fmt.Sprintf("gpu-%05d", i)
		sim := newSimUsage(uint64(i))
		// Daemons do not start in step: spread the first writes over
		// an interval.
		offset := time.Duration(rand.Int64N(int64(interval)))
		if mode == "before" {
			wg.Go(func() { legacyPublish(ctx, client, node, sim, offset, interval, leaseFor, &n) })
			continue
		}
		r := &lease.Renewer{Client: countingLeases{client: client, n: &n}, Node: node, Duration: leaseFor}
		wg.Go(func() {
			if sleepCtx(ctx, offset%(leaseFor/4)) {
				r.Run(ctx)
			}
		})
		wg.Go(func() {
			if !sleepCtx(ctx, offset) {
				return
			}
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				_ = r.PublishUsage(ctx, sim.next())
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	warm := interval + 5*time.Second
	b.Logf("%s: %d publishers started; warming up for %s", mode, nodes, warm)
	if !sleepCtx(ctx, warm) {
		b.Fatal("interrupted")
	}
	for _, c := range []*atomic.Int64{&n.nodeEvents, &n.leaseEvents, &n.nodeWrites, &n.leaseWrites, &n.leaseReads, &n.failed} {
		c.Store(0)
	}
	apiserver0, etcd0 := procCPU(b, pids["kube-apiserver"]), procCPU(b, pids["etcd"])
	began := time.Now()
	time.Sleep(window)
	r := usageResult{window: time.Since(began),
		apiserverCPU: procCPU(b, pids["kube-apiserver"]) - apiserver0, etcdCPU: procCPU(b, pids["etcd"]) - etcd0,
		nodeEvents: n.nodeEvents.Load(), leaseEvents: n.leaseEvents.Load(),
		nodeWrites: n.nodeWrites.Load(), leaseWrites: n.leaseWrites.Load(), leaseReads: n.leaseReads.Load(),
		failed: n.failed.Load()}
	b.Logf("%s: %+v", mode, r)
	return r
}

// legacyPublish is one node daemon as it was before live use moved to
// the lease: a merge patch of the Node's usage annotation every interval
// (inventory.Publisher.PublishUsage), and a read and update of the lease
// every leaseFor/4 (lease.Renewer.Renew).
func legacyPublish(ctx context.Context, client kubernetes.Interface, node string, sim *simUsage,
	offset, interval, leaseFor time.Duration, n *usageCounters) {
	if !sleepCtx(ctx, offset%(leaseFor/4)) {
		return
	}
	renew := time.NewTicker(leaseFor / 4)
	defer renew.Stop()
	nextUsage := time.Now().Add(offset - offset%(leaseFor/4))
	usage := time.NewTimer(time.Until(nextUsage))
	defer usage.Stop()
	leases := countingLeases{client: client, n: n}
	renewOnce := func() {
		now := metav1.NowMicro()
		seconds, holder := int32(leaseFor/time.Second), node
		l, err := leases.Get(ctx, gpusharev1.LeaseNamespace, lease.Name(node))
		if apierrors.IsNotFound(err) {
			_, _ = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: lease.Name(node), Namespace: gpusharev1.LeaseNamespace},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds,
					AcquireTime: &now, RenewTime: &now}})
			return
		}
		if err != nil {
			return
		}
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &seconds, &now
		_, _ = leases.Update(ctx, l)
	}
	renewOnce()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			renewOnce()
		case <-usage.C:
			usage.Reset(interval)
			value, err := gpusharev1.Marshal(sim.next())
			if err != nil {
				n.failed.Add(1)
				continue
			}
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
				"annotations": map[string]string{gpusharev1.UsageAnnotation: value}}})
			_, err = client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
			n.nodeWrites.Add(1)
			if err != nil && ctx.Err() == nil {
				n.failed.Add(1)
			}
		}
	}
}

// countingLeases is lease.Client over client-go, counting requests.
type countingLeases struct {
	client kubernetes.Interface
	n      *usageCounters
}

func (l countingLeases) Get(ctx context.Context, ns, name string) (*coordinationv1.Lease, error) {
	l.n.leaseReads.Add(1)
	out, err := l.client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	l.failedIf(ctx, err)
	return out, err
}

func (l countingLeases) Create(ctx context.Context, x *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	l.n.leaseWrites.Add(1)
	out, err := l.client.CoordinationV1().Leases(x.Namespace).Create(ctx, x, metav1.CreateOptions{})
	l.failedIf(ctx, err)
	return out, err
}

func (l countingLeases) Update(ctx context.Context, x *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	l.n.leaseWrites.Add(1)
	out, err := l.client.CoordinationV1().Leases(x.Namespace).Update(ctx, x, metav1.UpdateOptions{})
	l.failedIf(ctx, err)
	return out, err
}

func (l countingLeases) failedIf(ctx context.Context, err error) {
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		l.n.failed.Add(1)
	}
}

// simUsage is a node's 8 GPUs whose use drifts a little each sample, and
// now and then jumps.
type simUsage struct {
	rnd  *rand.Rand
	util [8]int64
	mem  [8]int64
}

func newSimUsage(seed uint64) *simUsage {
	s := &simUsage{rnd: rand.New(rand.NewPCG(seed, 21))}
	for i := range s.util {
		s.util[i] = 20 + s.rnd.Int64N(60)
		s.mem[i] = 10000 + s.rnd.Int64N(60000)
	}
	return s
}

func (s *simUsage) next() *gpusharev1.GPUUsage {
	u := &gpusharev1.GPUUsage{Time: metav1.Now()}
	jump := s.rnd.IntN(50) == 0
	for i := range s.util {
		s.util[i] = min(max(s.util[i]+s.rnd.Int64N(7)-3, 0), 100)
		s.mem[i] = min(max(s.mem[i]+s.rnd.Int64N(201)-100, 0), 81559)
		if jump && i == 0 {
			s.util[i] = (s.util[i] + 25) % 100
		}
		u.GPUs = append(u.GPUs, gpusharev1.GPULoad{Index: i, UtilizationPercent: s.util[i], UsedMemoryMiB: s.mem[i]})
	}
	return u
}

// countEvents counts the events of the watches get opens, opening a new
// one from the last resource version seen when one ends, until ctx ends.
func countEvents(ctx context.Context, get func(rv string) (watch.Interface, error), count *atomic.Int64) {
	rv := ""
	for ctx.Err() == nil {
		w, err := get(rv)
		if err != nil {
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = ""
				break
			}
			count.Add(1)
			if o, ok := ev.Object.(metav1.Object); ok {
				rv = o.GetResourceVersion()
			}
		}
		w.Stop()
	}
}

// procCPU is the CPU seconds (user and system) process pid has used.
func procCPU(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command, which may hold spaces: state is the
	// 3rd field, utime the 14th and stime the 15th.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatal(err)
	}
	const userHZ = 100 // sysconf(_SC_CLK_TCK) on Linux
	return float64(utime+stime) / userHZ
}

// createBenchNodes creates n nodes of 8 H100s, controlplane.InFlight at
// a time.
func createBenchNodes(b *testing.B, client kubernetes.Interface, n int) {
	ctx := context.Background()
	err := controlplane.Parallel(ctx, n, func(i int) error {
		spec := controlplane.NodeSpec{Name: fmt.Sprintf("gpu-%05d", i), Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Count: 8}
		return controlplane.CreateNode(ctx, client, spec)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// sleepCtx sleeps d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return v
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return v
}
