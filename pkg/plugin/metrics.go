package plugin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.decisions, m.latency}
}

func (m *metrics) observe(result string, start time.Time) {
	m.decisions.WithLabelValues(result).Inc()
	if !start.IsZero() {
		m.latency.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}
}
