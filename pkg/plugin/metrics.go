package plugin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpushare/gpushare/pkg/defrag"
)

// Results of a scheduling decision, the result label of the metrics.
const (
	resultScheduled     = "scheduled"
	resultUnschedulable = "unschedulable"
	resultInvalid       = "invalid"
)

// metrics are the plugin's decision counter and latency histogram. A
// decision runs from PreFilter to Reserve (scheduled) or PostFilter
// (unschedulable); a pod whose request is malformed is invalid.
type metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	// learned is the GPU pods each profile's learned workload has
	// counted (workload.Learner.Observed).
	learned *prometheus.GaugeVec
	// kept is 1 while a profile's policy keeps idle GPUs spare for
	// whole-GPU pods (GPUShareArgs.Workload.KeepIdleGPUs), 0 otherwise.
	kept *prometheus.GaugeVec
	// defrag counts what the defragmentation movers do.
	defrag *defrag.Metrics
}

func newMetrics() *metrics {
	return &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpushare_scheduler_decisions_total",
			Help: "GPU placement decisions of the GPUShare plugin, by result.",
		}, []string{"result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpushare_scheduler_decision_duration_seconds",
			Help:    "Time from PreFilter to the GPUShare plugin's decision, by result.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"result"}),
		learned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpushare_scheduler_workload_pods",
			Help: "GPU pods the learned workload of the fragmentation-aware policy has counted, by scheduler profile: each pod once it is bound (after a restart: the profile's bound pods in the cluster, then each new one).",
		}, []string{"profile"}),
		kept: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpushare_scheduler_idle_gpus_kept",
			Help: "1 while the profile's policy keeps idle GPUs for the whole-GPU pods it expects (workload.keepIdleGPUs), 0 otherwise.",
		}, []string{"profile"}),
		defrag: defrag.NewMetrics(),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.decisions, m.latency, m.learned, m.kept}, m.defrag.Collectors()...)
}

// waitingCollector exports the GPU demand of the pods that found no room
// and are neither placed nor gone (cache.Cache.Waiting), read at scrape.
func waitingCollector(waiting func() int64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gpushare_scheduler_gpu_demand_waiting",
		Help: "GPU demand, in GPUs, of the pods the scheduler found no room for that are neither placed nor gone.",
	}, func() float64 { return float64(waiting()) / 1000 })
}

func (m *metrics) observe(result string, start time.Time) {
	m.decisions.WithLabelValues(result).Inc()
	if !start.IsZero() {
		m.latency.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}
}
