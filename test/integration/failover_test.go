package integration

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

const (
	// failoverLease is the lease the two schedulers of TestFailover elect
	// their leader with, as the chart names it beside kube-scheduler.
	failoverLease = "gpushare-scheduler"
	// failoverLeaseDuration is its duration: a standby takes over once
	// the lease has not been renewed for this long.
	failoverLeaseDuration = 4 * time.Second
	// failoverMargin is how much longer than the lease a takeover may
	// take: the standby's retry period (1 s), its view of the lease's
	// last renewal (up to one retry period old) and the test's polling.
	failoverMargin = 4 * time.Second
	failoverPods   = 60
)

// failoverConfig is deploy/scheduler-config.yaml electing its leader with
// kube-system/gpushare-scheduler and a short lease.
func failoverConfig(t *testing.T) []byte {
	t.Helper()
	return electing(t, readFile(t, "deploy/scheduler-config.yaml"),
		"  leaderElect: true\n  resourceNamespace: kube-system\n  resourceName: kube-scheduler\n", failoverLease)
}

// electing replaces the leaderElection lines election of a scheduler
// configuration with an election of kube-system/lease on failover's
// short lease.
func electing(t *testing.T, config []byte, election, lease string) []byte {
	t.Helper()
	if !bytes.Contains(config, []byte(election)) {
		t.Fatalf("the scheduler configuration no longer has %q", election)
	}
	return bytes.Replace(config, []byte(election), fmt.Appendf(nil,
		"  leaderElect: true\n  resourceNamespace: kube-system\n  resourceName: %s\n"+
			"  leaseDuration: %v\n  renewDeadline: 3s\n  retryPeriod: 1s\n", lease, failoverLeaseDuration), 1)
}

// bindings records every binding (node and allocation record) a watch
// sees for each pod: a pod bound twice, or whose record changes once it
// is bound, shows more than one.
type bindings struct {
	mu   sync.Mutex
	seen map[string]map[string]bool
	// third is closed once a third of the burst is bound.
	third chan struct{}
}

func (b *bindings) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[pod.Name] == nil {
		b.seen[pod.Name] = map[string]bool{}
		if len(b.seen) == failoverPods/3 {
			close(b.third)
		}
	}
	b.seen[pod.Name][pod.Spec.NodeName+" "+pod.Annotations[gpusharev1.AllocationAnnotation]] = true
}

func (b *bindings) of(name string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for k := range b.seen[name] {
		out = append(out, k)
	}
	return out
}

// TestFailover: two gpushare-schedulers elect a leader
// (kube-system/gpushare-scheduler, a 4 s lease); the leader is killed
// with SIGKILL in the middle of a burst of GPU pods, a third of them
// bound. The standby, whose cache took in every booking while it waited,
// takes the lease within the lease duration and a margin and schedules
// the rest: every pod that fits binds with a record, no GPU is
// over-committed, and no pod's binding or record changes once made.
//
// The standby is warm because kube-scheduler v1.37 starts and syncs its
// informers before it runs for the lease (cmd/kube-scheduler/app/server.go:
// "if !cc.ComponentConfig.DelayCacheUntilActive || cc.LeaderElection == nil {
// startInformersAndWaitForSync(ctx) }" comes before leaderElector.Run, and
// DelayCacheUntilActive is false by default), and GPUShare's cache is fed
// by handlers on those informers from the moment the plugin is made.
//
// The same with stock kube-scheduler and gpushare-extender: two
// kube-schedulers, each calling the extender beside it (as the chart runs
// them); the kill takes the leader and its extender, and the standby's
// extender, whose cache watched the cluster meanwhile, places the rest.
func TestFailover(t *testing.T) {
	ctx := context.Background()
	t.Run("plugin", func(t *testing.T) {
		c := startCluster(t)
		config := failoverConfig(t)
		kubeconfig := accountKubeconfig(t, c, "scheduler")
		var replicas []*replica
		for _, name := range []string{"gpushare-scheduler-a", "gpushare-scheduler-b"} {
			s, err := c.StartSchedulerAs(ctx, name, schedulerBin, kubeconfig, config)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Stop(10 * time.Second) })
			notForbidden(t, s.Process)
			replicas = append(replicas, &replica{Scheduler: s, metrics: func() map[string]*dto.MetricFamily { return scrape(t, s.URL+"/metrics") },
				kill: s.Kill})
		}
		checkFailover(t, c, failoverLease, replicas)
	})
	// Stock kube-scheduler elects its leader with kube-system/kube-scheduler
	// (its role may update no other lease); each replica calls the
	// extender beside it, and a kill takes both.
	t.Run("extender", func(t *testing.T) {
		c := startCluster(t)
		var replicas []*replica
		for _, name := range []string{"kube-scheduler-a", "kube-scheduler-b"} {
			e := startSecureExtender(t, c)
			config := electing(t, e.schedulerConfig(t), "  leaderElect: false\n", "kube-scheduler")
			s, err := c.StartScheduler(ctx, name, tools.Bin("kube-scheduler"), config)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Stop(10 * time.Second) })
			replicas = append(replicas, &replica{Scheduler: s, metrics: func() map[string]*dto.MetricFamily { return scrapeWith(t, e.client, e.base+"/metrics") },
				kill: func() { s.Kill(); e.proc.Kill() }})
		}
		checkFailover(t, c, "kube-scheduler", replicas)
	})
}

// replica is one scheduler replica of TestFailover: the process that runs
// for the lease, the metrics of the cache it places with, and its kill.
type replica struct {
	*controlplane.Scheduler
	metrics func() map[string]*dto.MetricFamily
	kill    func()
}

// checkFailover runs TestFailover's burst and kill on two replicas that
// elect their leader with kube-system/lease.
func checkFailover(t *testing.T, c *controlplane.Cluster, lease string, scheds []*replica) {
	ctx := context.Background()
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	var specs []controlplane.NodeSpec
	for i := range 6 {
		specs = append(specs, controlplane.NodeSpec{Name: fmt.Sprintf("t4-%d", i), Model: "Tesla T4", MemoryMiB: 15360, Count: 4})
	}
	createNodes(t, client, specs...)
	const capacityMiB = 6 * 4 * 15360

	acquired := `"Successfully acquired lease" lock="kube-system/` + lease + `"`
	holder := func() string {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	var leader, standby *replica
	err = waitFor(time.Minute, func() (bool, error) {
		var lead []*replica
		for _, s := range scheds {
			if strings.Contains(s.Tail(1<<20), acquired) {
				lead = append(lead, s)
			}
		}
		if len(lead) > 1 {
			return false, fmt.Errorf("both schedulers lead")
		}
		if len(lead) == 1 {
			leader = lead[0]
		}
		return leader != nil, nil
	})
	if err != nil {
		t.Fatalf("no scheduler took the lease: %v", err)
	}
	standby = scheds[0]
	if leader == scheds[0] {
		standby = scheds[1]
	}
	oldHolder := holder()
	t.Logf("%s leads (%s); %s stands by", leader.Name, oldHolder, standby.Name)

	// The standby's cache is built before it leads: it holds every GPU.
	err = waitFor(30*time.Second, func() (bool, error) {
		v, err := metricSum(standby.metrics(), "gpushare_gpu_memory_capacity_bytes", nil)
		return err == nil && int64(v) == capacityMiB<<20, nil
	})
	if err != nil {
		t.Fatalf("the standby's cache never held the %d MiB of the nodes' GPUs: %v", capacityMiB, err)
	}

	seen := &bindings{seen: map[string]map[string]bool{}, third: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=failover" }))
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    seen.observe,
		UpdateFunc: func(_, obj any) { seen.observe(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	// The burst: all pods at once from four goroutines, faster than the
	// leader binds them, so that the kill lands while pods are still
	// coming and others are queued or being bound.
	pods := mixedPods(failoverPods, 21, "burst", "failover")
	var created atomic.Int32
	createErr := make(chan error, 1)
	go func() {
		var (
			wg   sync.WaitGroup
			errs = make(chan error, len(pods))
			next = make(chan *corev1.Pod)
		)
		for range 4 {
			wg.Go(func() {
				for p := range next {
					if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
						errs <- err
						continue
					}
					created.Add(1)
				}
			})
		}
		for _, p := range pods {
			next <- p
		}
		close(next)
		wg.Wait()
		close(errs)
		createErr <- <-errs
	}()
	countBound := func() (int, error) {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=failover"})
		if err != nil {
			return 0, err
		}
		n := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		return n, nil
	}
	select {
	case <-seen.third:
	case <-time.After(time.Minute):
		t.Fatalf("a third of the burst was not bound within a minute")
	}
	leader.kill()
	killed := time.Now()
	boundAtKill, err := countBound()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s (pid %d, SIGKILL) with %d of %d pods created and %d bound", leader.Name, leader.Cmd.Process.Pid, created.Load(), failoverPods, boundAtKill)

	// While it still stands by, the standby books what the dead leader
	// bound: its cache is warm when it takes over.
	warm := false
	if err := waitFor(failoverLeaseDuration, func() (bool, error) {
		_, bookedMiB := checkNoOvercommit(t, client)
		v, err := metricSum(standby.metrics(), "gpushare_gpu_memory_booked_bytes", nil)
		if err != nil || int64(v) != bookedMiB<<20 {
			return false, nil
		}
		warm = holder() == oldHolder && !strings.Contains(standby.Tail(1<<20), acquired)
		return true, nil
	}); err != nil {
		t.Errorf("the standby's cache never booked what the dead leader bound: %v", err)
	} else if !warm {
		t.Errorf("the standby took the lease before its cache booked what the dead leader bound")
	}

	// The takeover: the lease changes hands within its duration and a margin.
	var newHolder string
	if err := waitFor(failoverLeaseDuration+failoverMargin+5*time.Second, func() (bool, error) {
		newHolder = holder()
		return newHolder != "" && newHolder != oldHolder, nil
	}); err != nil {
		t.Fatalf("the standby did not take the lease from %s: %v", oldHolder, err)
	}
	takeover := time.Since(killed)
	t.Logf("takeover: %s holds the lease %v after the kill (lease duration %v)", newHolder, takeover.Round(10*time.Millisecond), failoverLeaseDuration)
	if takeover > failoverLeaseDuration+failoverMargin {
		t.Errorf("the standby took %v to take the lease; want within %v", takeover, failoverLeaseDuration+failoverMargin)
	}
	if err := waitFor(10*time.Second, func() (bool, error) { return strings.Contains(standby.Tail(1<<20), acquired), nil }); err != nil {
		t.Errorf("the lease went to %s but %s never logged taking it", newHolder, standby.Name)
	}

	if err := <-createErr; err != nil {
		t.Fatalf("creating the burst: %v", err)
	}
	bound := waitSettled(t, client, "app=failover", 5*time.Second, 2*time.Minute)
	t.Logf("%d of %d pods bound, %d of them after the kill; settled %v after the kill", bound, failoverPods, bound-boundAtKill, time.Since(killed).Round(time.Second))
	if bound <= boundAtKill {
		t.Errorf("the standby bound no pod after taking over (%d bound at the kill, %d now)", boundAtKill, bound)
	}
	if n := strings.Count(standby.Tail(1<<22), `"Successfully bound pod to node"`); n == 0 {
		t.Errorf("%s logged no pod it bound", standby.Name)
	}

	// No GPU over-committed; every bound pod has the record it was bound
	// with, and one binding only.
	states, booked := recompute(t, client)
	if booked != bound {
		t.Errorf("%d pods are bound but %d hold GPUs by their records", bound, booked)
	}
	list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=failover"})
	if err != nil {
		t.Fatal(err)
	}
	model, placer := fitChecker(t)
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName != "" {
			record(t, pod)
			if b := seen.of(pod.Name); len(b) != 1 {
				t.Errorf("pod %s was seen with %d bindings (node and record): %q", pod.Name, len(b), b)
			}
			continue
		}
		// Every pod that fits binds: a Pending one fits no GPU.
		req, err := model.PodRequest(pod)
		if err != nil {
			t.Fatalf("pod %s: %v", pod.Name, err)
		}
		for name, s := range states {
			if p, _ := placer.Place(s, req); p != nil {
				t.Errorf("pod %s is Pending but fits node %s under the records", pod.Name, name)
				break
			}
		}
	}
}
