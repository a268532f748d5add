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
		defrag: defrag.NewMetrics(),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.decisions, m.latency, m.learned}, m.defrag.Collectors()...)
}

func (m *metrics) observe(result string, start time.Time) {
	m.decisions.WithLabelValues(result).Inc()
	if !start.IsZero() {
		m.latency.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}
}
