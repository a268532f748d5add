package defrag

import "github.com/prometheus/client_golang/prometheus"

// Metrics count what the movers do: Plans by result (started, done,
// failed, timed_out, gone, changed, none), Moved the pods evicted to be
// moved, Freed the GPUs the plans done made room on.
type Metrics struct {
	Plans        *prometheus.CounterVec
	Moved, Freed prometheus.Counter
}

// NewMetrics returns the movers' metrics, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		Plans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpushare_scheduler_defrag_plans_total",
			Help: "Defragmentation plans by result: started, done (the waiting pod and every replacement took their places), failed (an eviction was refused), timed_out, gone (the waiting pod), changed (the cluster changed before the plan was held), none (no plan found).",
		}, []string{"result"}),
		Moved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpushare_scheduler_defrag_pods_moved_total",
			Help: "Pods evicted by defragmentation plans to be recreated elsewhere.",
		}),
		Freed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpushare_scheduler_defrag_gpus_freed_total",
			Help: "GPUs that defragmentation plans made room on for a waiting pod, counted when the plan is done.",
		}),
	}
}

// Collectors returns the metrics, to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Plans, m.Moved, m.Freed}
}
