package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/quota"
)

// Metrics counts the webhook's answers.
type Metrics struct {
	reviews *prometheus.CounterVec
}

// NewMetrics registers the webhook's counters with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpushare_quota_reviews_total",
		Help: "Pod creations the quota webhook answered, by result: charged (a GPU charge written), uncharged (nothing to charge, or not priceable where no quota bounds GPUs), refused.",
	}, []string{"result"})}
	for _, r := range []string{"charged", "uncharged", "refused"} {
		m.reviews.WithLabelValues(r)
	}
	reg.MustRegister(m.reviews)
	return m
}

func (m *Metrics) review(result string) {
	if m != nil {
		m.reviews.WithLabelValues(result).Inc()
	}
}

// quotaCollector reports the ResourceQuotas on the charged resources,
// used and hard, as the quota controller last counted them.
type quotaCollector struct {
	list         func() ([]*corev1.ResourceQuota, error)
	memory, gpus *prometheus.Desc
	failed       *prometheus.Desc
}

// NewQuotaCollector reports, for each ResourceQuota list returns that
// bounds a charged resource, its used and hard GPU memory (bytes) and
// compute (GPUs).
func NewQuotaCollector(list func() ([]*corev1.ResourceQuota, error)) prometheus.Collector {
	labels := []string{"namespace", "resourcequota", "type"}
	return &quotaCollector{list: list,
		memory: prometheus.NewDesc("gpushare_quota_memory_bytes",
			"GPU memory charged to a namespace (type used) and its bound (type hard), by ResourceQuota on gpushare.io/quota-memory.", labels, nil),
		gpus: prometheus.NewDesc("gpushare_quota_compute_gpus",
			"GPU compute charged to a namespace (type used) and its bound (type hard), in GPUs, by ResourceQuota on gpushare.io/quota-compute.", labels, nil),
		failed: prometheus.NewDesc("gpushare_quota_list_errors", "1 when the webhook could not list its ResourceQuotas for this scrape.", nil, nil),
	}
}

func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.memory
	ch <- c.gpus
	ch <- c.failed
}

func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	quotas, err := c.list()
	failed := 0.0
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, failed)
	for _, q := range quotas {
		for _, r := range []struct {
			name   corev1.ResourceName
			desc   *prometheus.Desc
			factor float64
		}{{quota.MemoryResource, c.memory, 1}, {quota.ComputeResource, c.gpus, 0.01}} {
			key := "requests." + r.name
			hard, ok := q.Spec.Hard[key]
			if !ok {
				continue
			}
			used := q.Status.Used[key]
			ch <- prometheus.MustNewConstMetric(r.desc, prometheus.GaugeValue, float64(hard.Value())*r.factor, q.Namespace, q.Name, "hard")
			ch <- prometheus.MustNewConstMetric(r.desc, prometheus.GaugeValue, float64(used.Value())*r.factor, q.Namespace, q.Name, "used")
		}
	}
}
