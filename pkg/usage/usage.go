// Package usage reports what a node's GPUs are really doing: Prometheus
// metrics per GPU and per pod (allocated against used), from the GPU
// backend and the pods' allocation records.
package usage

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/inventory"
	"github.com/gpushare/gpushare/pkg/record"
)

const mib = 1 << 20

var (
	gpuLabels      = []string{"gpu", "uuid", "model"}
	utilizationDsc = prometheus.NewDesc("gpushare_node_gpu_utilization_ratio",
		"Share of time a kernel ran on the GPU over the driver's sample period, 0 to 1.", gpuLabels, nil)
	memUsedDesc = prometheus.NewDesc("gpushare_node_gpu_memory_used_bytes",
		"GPU memory in use, by every process.", gpuLabels, nil)
	memTotalDesc = prometheus.NewDesc("gpushare_node_gpu_memory_total_bytes",
		"GPU memory.", gpuLabels, nil)
	tempDesc = prometheus.NewDesc("gpushare_node_gpu_temperature_celsius",
		"GPU temperature.", gpuLabels, nil)
	powerDesc = prometheus.NewDesc("gpushare_node_gpu_power_watts",
		"GPU power draw.", gpuLabels, nil)
	healthyDesc = prometheus.NewDesc("gpushare_node_gpu_healthy",
		"1 if the GPU is healthy, 0 after a fatal error.", gpuLabels, nil)
	outsideDesc = prometheus.NewDesc("gpushare_node_gpu_memory_used_outside_pods_bytes",
		"GPU memory used by processes that belong to no pod of this node (e.g. outside Kubernetes).", gpuLabels, nil)
	allocatedDesc = prometheus.NewDesc("gpushare_container_gpu_memory_allocated_bytes",
		"GPU memory the container's allocation record gives it.", []string{"namespace", "pod", "container", "gpu", "uuid"}, nil)
	podUsedDesc = prometheus.NewDesc("gpushare_pod_gpu_memory_used_bytes",
		"GPU memory used by the pod's processes.", []string{"namespace", "pod", "gpu", "uuid"}, nil)
)

// PodOfPID maps a process to the UID of the pod it runs in.
type PodOfPID func(pid int) (types.UID, bool)

// Collector is the node daemon's Prometheus collector.
type Collector struct {
	Backend gpu.Backend
	// Node is this node's name.
	Node string
	// Pods lists the pods on this node.
	Pods func() []*corev1.Pod
	// Reader reads what each pod's record gives its containers, by the
	// rules the scheduler books them (gpushare's records and the systems'
	// it adopts, while the pods run).
	Reader record.Reader
	// PodOf maps GPU processes to pods; CgroupPodOf if nil.
	PodOf  PodOfPID
	Logger klog.Logger
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{utilizationDsc, memUsedDesc, memTotalDesc, tempDesc, powerDesc, healthyDesc, outsideDesc, allocatedDesc, podUsedDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	devs, err := c.Backend.Devices()
	if err != nil {
		c.Logger.Error(err, "Reading GPUs for metrics")
		return
	}
	use, err := c.Backend.Usage()
	if err != nil {
		c.Logger.Error(err, "Reading GPU usage for metrics")
		return
	}
	podOf := c.PodOf
	if podOf == nil {
		podOf = CgroupPodOf
	}
	pods := map[types.UID]*corev1.Pod{}
	for _, p := range c.Pods() {
		pods[p.UID] = p
	}
	for i, d := range devs {
		labels := []string{strconv.Itoa(d.Index), d.UUID, d.Model}
		gauge := func(desc *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
		}
		gauge(memTotalDesc, float64(d.MemoryMiB)*mib)
		gauge(healthyDesc, boolValue(d.Healthy))
		if i >= len(use) || use[i].UUID != d.UUID {
			continue
		}
		u := use[i]
		gauge(utilizationDsc, float64(u.UtilizationPercent)/100)
		gauge(memUsedDesc, float64(u.UsedMemoryMiB)*mib)
		gauge(tempDesc, float64(u.TemperatureC))
		gauge(powerDesc, u.PowerWatts)
		// Processes to pods.
		byPod := map[types.UID]int64{}
		var outside int64
		for _, proc := range u.Processes {
			if uid, ok := podOf(proc.PID); ok && pods[uid] != nil {
				byPod[uid] += proc.UsedMemoryMiB
				continue
			}
			outside += proc.UsedMemoryMiB
		}
		gauge(outsideDesc, float64(outside)*mib)
		for uid, used := range byPod {
			p := pods[uid]
			ch <- prometheus.MustNewConstMetric(podUsedDesc, prometheus.GaugeValue, float64(used)*mib,
				p.Namespace, p.Name, strconv.Itoa(d.Index), d.UUID)
		}
	}
	node := record.NodeOf(c.Node, inventory.From(devs, gpusharev1.ModeShared, false))
	for _, p := range pods {
		b, err := c.Reader.Holds(p, node)
		if err != nil {
			continue
		}
		for _, ctr := range b.Allocation.Containers {
			for _, g := range ctr.GPUs {
				ch <- prometheus.MustNewConstMetric(allocatedDesc, prometheus.GaugeValue, float64(g.MemoryMiB)*mib,
					p.Namespace, p.Name, ctr.Name, strconv.Itoa(g.Index), g.UUID)
			}
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// podCgroup matches the pod UID in a cgroup path, under the cgroupfs
// ("/kubepods/burstable/pod<uid>/...") and systemd
// (".../kubepods-burstable-pod<uid_with_underscores>.slice/...") drivers.
var podCgroup = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)

// CgroupPodOf reads /proc/<pid>/cgroup for the pod UID.
func CgroupPodOf(pid int) (types.UID, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", false
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if uid, ok := PodUIDFromCgroup(s.Text()); ok {
			return uid, true
		}
	}
	return "", false
}

// PodUIDFromCgroup finds the pod UID in one line of /proc/<pid>/cgroup.
func PodUIDFromCgroup(line string) (types.UID, bool) {
	m := podCgroup.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return types.UID(strings.ReplaceAll(m[1], "_", "-")), true
}
