package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/plugin"
	gpurecord "github.com/gpushare/gpushare/pkg/record"
)

// TestConfigChangeKeepsBookings: an operator removes the unitOverrides
// entry of deploy/scheduler-config.yaml (its comment says "adjust or
// remove") and restarts the scheduler. The running team-mib pods asked
// aliyun.com/gpu-mem in MiB; under the new model they ask GiB, and their
// records no longer conform. They keep booking the GPU their records
// name (fail closed), each gets an event and counts in
// gpushare_allocation_records_unconforming, and a tenant's pod that fits
// only the memory they hold is not placed there. Before the one reader,
// the records booked nothing and the GPU was handed out twice.
func TestConfigChangeKeepsBookings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	config := readFile(t, "deploy/scheduler-config.yaml")
	c, client, sched := startPlugin(t, config)
	createNodes(t, client, controlplane.NodeSpec{Name: "t4-0", Model: "Tesla T4", MemoryMiB: 15360, Count: 1})
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-mib"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("mib-%d", i), Namespace: "team-mib"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{gpurecord.AliyunMemory: *k8sresource.NewQuantity(3000, k8sresource.DecimalSI)}}}}}}
		if _, err := client.CoreV1().Pods("team-mib").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		boundPod(t, client, "team-mib", p.Name)
	}
	waitBooked(t, sched, "t4-0", []float64{9000})

	// The override removed; the scheduler restarted with it.
	override := []byte("        unitOverrides:\n        - {name: aliyun.com/gpu-mem, unit: MiB, namespaces: [team-mib]}\n")
	if bytes.Count(config, override) != 2 {
		t.Fatalf("deploy/scheduler-config.yaml no longer has its two unitOverrides entries as this test removes them")
	}
	changed := bytes.ReplaceAll(config, override, nil)
	sched.Stop(10 * time.Second)
	sched, err := c.StartSchedulerAs(ctx, "gpushare-scheduler-2", schedulerBin, accountKubeconfig(t, c, "scheduler"), changed)
	if err != nil {
		t.Fatal(err)
	}
	waitBooked(t, sched, "t4-0", []float64{9000})
	for i := range 3 {
		eventNote(t, client, "team-mib", fmt.Sprintf("mib-%d", i), plugin.ReasonRecordUnconforming, "booked as it stands")
	}
	families := scrape(t, sched.URL+"/metrics")
	if v, err := metricSum(families, "gpushare_allocation_records_unconforming", nil); err != nil || v != 3 {
		t.Errorf("gpushare_allocation_records_unconforming = %v (%v); want 3", v, err)
	}
	// The scheduler's collector target: 80 unless GOGC is set.
	wantGOGC := 80.0
	if v, set := os.LookupEnv("GOGC"); set {
		switch n, err := strconv.ParseFloat(v, 64); {
		case err == nil:
			wantGOGC = n
		case v == "off":
			wantGOGC = -1 // not checked
		default:
			wantGOGC = 100 // empty or unreadable: the runtime's default
		}
	}
	if v, err := metricSum(families, "go_gc_gogc_percent", nil); wantGOGC >= 0 && (err != nil || v != wantGOGC) {
		t.Errorf("go_gc_gogc_percent = %v (%v); want %v", v, err, wantGOGC)
	}

	// 15360 - 9000 = 6360 MiB free: 10000 does not fit, 6000 does.
	if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("big", 10000, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, client, "default", "big", "largest free share on any GPU is 6360 MiB, pod needs 10000 MiB")
	if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("fits", 6000, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	boundPod(t, client, "default", "fits")
	if n, _ := checkNoOvercommit(t, client); n != 4 {
		t.Errorf("%d pods hold GPUs, want 4 (three team-mib pods, fits)", n)
	}
}
