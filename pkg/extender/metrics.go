package extender

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the extender's Prometheus metrics.
type Metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

// NewMetrics registers the extender's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpushare_extender_requests_total",
			Help: "Extender requests by verb (filter, prioritize, bind) and result (ok, bad_request, error).",
		}, []string{"verb", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpushare_extender_request_duration_seconds",
			Help:    "Time to answer an extender request, by verb and result.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"verb", "result"}),
	}
	reg.MustRegister(m.decisions, m.latency)
	return m
}

func (m *Metrics) observe(verb, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(verb, result).Inc()
	m.latency.WithLabelValues(verb, result).Observe(d.Seconds())
}
