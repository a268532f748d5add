package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// TestWorkloadLearned: gpushare-scheduler's default policy learns the
// workload from its pods, each once it is bound, and a restarted
// scheduler learns it again from the bound pods in the cluster before its
// first decision. Pods that never bind (here a tenant's, whose
// nodeSelector matches no node) count for nothing, before and after the
// restart: they cannot steer where other pods go.
func TestWorkloadLearned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, client, s := startPlugin(t, nil)
	createNodes(t, client, controlplane.NodeSpec{Name: "t4-0", Model: "Tesla T4", MemoryMiB: 15360, Count: 4})
	learned := func(s *controlplane.Scheduler, want int) {
		t.Helper()
		var got float64
		err := waitFor(30*time.Second, func() (bool, error) {
			v, err := metricSum(scrape(t, s.URL+"/metrics"), "gpushare_scheduler_workload_pods", map[string]string{"profile": "gpu-scheduler"})
			got = v
			return err == nil && int(v) == want, nil
		})
		if err != nil {
			t.Fatalf("%s: the learned workload counts %v pods, want %d", s.Name, got, want)
		}
	}
	create := func(name string) {
		t.Helper()
		p := gpuPod(name, 2048, 0)
		p.Spec.SchedulerName = "gpu-scheduler"
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		boundPod(t, client, "default", name)
	}
	for i := range 5 {
		create(fmt.Sprintf("learn-%d", i))
	}
	learned(s, 5)
	const stuck = 40
	for i := range stuck {
		p := gpuPod(fmt.Sprintf("stuck-%d", i), 15360, 0)
		p.Spec.SchedulerName = "gpu-scheduler"
		p.Spec.NodeSelector = map[string]string{"no-such-label": "x"}
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The scheduler has tried the last of them.
	failedSchedulingMessage(t, client, "default", fmt.Sprintf("stuck-%d", stuck-1), "node(s) didn't match Pod's node affinity/selector")
	learned(s, 5)

	s.Stop(10 * time.Second)
	s2, err := c.StartSchedulerAs(ctx, "gpushare-scheduler-2", schedulerBin, accountKubeconfig(t, c, "scheduler"),
		readFile(t, "deploy/scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Stop(10 * time.Second) })
	create("learn-after-restart")
	// The five pods that run, learned from the cluster, and the new one.
	learned(s2, 6)
}
