package cache_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
)

const (
	capacityMetric = "gpushare_gpu_memory_capacity_bytes"
	bookedMetric   = "gpushare_gpu_memory_booked_bytes"
	computeMetric  = "gpushare_gpu_compute_booked_ratio"
	claimedMetric  = "gpushare_gpu_memory_claimed_bytes"
)

// expectedMetrics renders, in the text format, what the collector should
// export for GPUs: per node and GPU, its model, memory and booking.
func expectedMetrics(refused int, gpus []metricGPU) string {
	var capacity, booked, claimed, compute strings.Builder
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, g := range gpus {
		fmt.Fprintf(&capacity, "%s{gpu=%q,model=%q,node=%q} %s\n", capacityMetric, strconv.Itoa(g.gpu), g.model, g.node, f(float64(g.mib)*1024*1024))
		fmt.Fprintf(&booked, "%s{gpu=%q,node=%q} %s\n", bookedMetric, strconv.Itoa(g.gpu), g.node, f(float64(g.used.MemoryMiB)*1024*1024))
		fmt.Fprintf(&claimed, "%s{gpu=%q,node=%q} %s\n", claimedMetric, strconv.Itoa(g.gpu), g.node, f(float64(g.claimedMiB)*1024*1024))
		fmt.Fprintf(&compute, "%s{gpu=%q,node=%q} %s\n", computeMetric, strconv.Itoa(g.gpu), g.node, f(float64(g.used.Compute)/100))
	}
	return "# HELP gpushare_allocation_records_refused Pods whose allocation record books nothing: not bound, for another node, or unreadable.\n" +
		"# TYPE gpushare_allocation_records_refused gauge\n" + fmt.Sprintf("gpushare_allocation_records_refused %d\n", refused) +
		"# HELP " + capacityMetric + " Memory of each GPU of the gpushare nodes.\n" +
		"# TYPE " + capacityMetric + " gauge\n" + capacity.String() +
		"# HELP " + bookedMetric + " GPU memory booked by pods (allocation records and assumed placements) and held by defragmentation plans, over the capacity where records over-commit a GPU.\n" +
		"# TYPE " + bookedMetric + " gauge\n" + booked.String() +
		"# HELP " + claimedMetric + " GPU memory booked by ResourceClaims of gpushare's DRA devices, part of gpushare_gpu_memory_booked_bytes.\n" +
		"# TYPE " + claimedMetric + " gauge\n" + claimed.String() +
		"# HELP " + computeMetric + " Share of each GPU's compute booked by pods, 0 to 1, over 1 where records over-commit a GPU.\n" +
		"# TYPE " + computeMetric + " gauge\n" + compute.String() +
		editedMetrics(0) + unconformingMetrics(0)
}

// unconformingMetrics is the exposition of
// gpushare_allocation_records_unconforming at n.
func unconformingMetrics(n int) string {
	return "# HELP gpushare_allocation_records_unconforming Running pods whose allocation record is not what the pod asks (its request reads otherwise under the resource model now, or the record was written by hand): the record keeps booking the GPUs it names.\n" +
		"# TYPE gpushare_allocation_records_unconforming gauge\n" + fmt.Sprintf("gpushare_allocation_records_unconforming %d\n", n)
}

// editedMetrics is the exposition of gpushare_pods_request_edited at n.
func editedMetrics(n int) string {
	return "# HELP gpushare_pods_request_edited Running pods whose request-shaping annotations changed after binding: their records keep booking their GPUs, and the node daemon serves their containers no more.\n" +
		"# TYPE gpushare_pods_request_edited gauge\n" + fmt.Sprintf("gpushare_pods_request_edited %d\n", n)
}

type metricGPU struct {
	node, model string
	gpu         int
	mib         int64
	used        alloc.Usage
	// claimedMiB is the part of used that ResourceClaims hold.
	claimedMiB int64
}

func TestCollector(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 40960, 16384))
	l4 := inventory("n2", gpusharev1.ModeShared, 23034)
	l4.GPUs[0].Model = "NVIDIA L4"
	c.SetNode(inventoryNode(t, "n2", l4))
	rejected := gpuNode(t, "n3", 1024)
	rejected.Labels = nil
	c.SetNode(rejected)

	a := appRecord("n1",
		[]gpusharev1.GPUShare{share("n1", 0, 10000, 30)},
		[]gpusharev1.GPUShare{share("n1", 0, 2345, 15), share("n1", 1, 777, 5)})
	c.SetPod(recordedPod(t, "a", a))
	assumed := placement("n2", 0, 4321, 45)
	if err := c.Assume("b", "default/b", assumed); err != nil {
		t.Fatal(err)
	}

	n1 := appUsage(2, a)
	want := []metricGPU{
		{"n1", testModel, 0, 40960, n1[0], 0},
		{"n1", testModel, 1, 16384, n1[1], 0},
		{"n2", "NVIDIA L4", 0, 23034, alloc.Usage{MemoryMiB: 4321, Compute: 45}, 0},
	}
	collector := cache.NewCollector(c)
	if err := testutil.CollectAndCompare(collector, strings.NewReader(expectedMetrics(0, want))); err != nil {
		t.Errorf("metrics:\n%v", err)
	}
	if n := testutil.CollectAndCount(collector); n != 3+4*len(want) {
		t.Errorf("collected %d metrics, want %d (four per GPU of the gpushare nodes, the refused and unconforming records, the edited pods)", n, 3+4*len(want))
	}

	// The exported bookings follow the cache.
	c.RemovePod("a")
	c.Forget("b")
	for i := range want {
		want[i].used = alloc.Usage{}
	}
	if err := testutil.CollectAndCompare(collector, strings.NewReader(expectedMetrics(0, want))); err != nil {
		t.Errorf("metrics after the pods went:\n%v", err)
	}
}

// The metrics agree with the cache's own snapshot.
func TestCollectorMatchesSnapshot(t *testing.T) {
	c, _ := newCache(t)
	c.SetNode(gpuNode(t, "n1", 16384, 16384, 8192))
	c.SetPod(recordedPod(t, "a", appRecord("n1", []gpusharev1.GPUShare{share("n1", 2, 8192, 100)})))
	if err := c.Assume("b", "default/b", placement("n1", 1, 123, 7)); err != nil {
		t.Fatal(err)
	}
	var want []metricGPU
	for _, s := range c.Snapshot() {
		for i, g := range s.Node.GPUs {
			want = append(want, metricGPU{s.Node.Name, g.Model, i, g.MemoryMiB, s.GPUs[i], 0})
		}
	}
	if len(want) != 3 || want[1].used != (alloc.Usage{MemoryMiB: 123, Compute: 7}) || want[2].used != (alloc.Usage{MemoryMiB: 8192, Compute: 100}) {
		t.Fatalf("snapshot %+v does not hold the two bookings", want)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(cache.NewCollector(c)); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expectedMetrics(0, want))); err != nil {
		t.Errorf("metrics differ from the snapshot:\n%v", err)
	}
}
