package cache

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpushare/gpushare/pkg/alloc"
)

var (
	capacityDesc = prometheus.NewDesc("gpushare_gpu_memory_capacity_bytes",
		"Memory of each GPU of the gpushare nodes.", []string{"node", "gpu", "model"}, nil)
	bookedDesc = prometheus.NewDesc("gpushare_gpu_memory_booked_bytes",
		"GPU memory booked by pods (allocation records and assumed placements) and held by defragmentation plans, over the capacity where records over-commit a GPU.", []string{"node", "gpu"}, nil)
	claimedDesc = prometheus.NewDesc("gpushare_gpu_memory_claimed_bytes",
		"GPU memory booked by ResourceClaims of gpushare's DRA devices, part of gpushare_gpu_memory_booked_bytes.", []string{"node", "gpu"}, nil)
	computeDesc = prometheus.NewDesc("gpushare_gpu_compute_booked_ratio",
		"Share of each GPU's compute booked by pods, 0 to 1, over 1 where records over-commit a GPU.", []string{"node", "gpu"}, nil)
	refusedDesc = prometheus.NewDesc("gpushare_allocation_records_refused",
		"Pods whose allocation record books nothing: not bound, for another node, or not what the pod asks for.", nil, nil)
	editedDesc = prometheus.NewDesc("gpushare_pods_request_edited",
		"Running pods whose request-shaping annotations changed after binding: their records keep booking their GPUs, and the node daemon serves their containers no more.", nil, nil)
)

// Collector exports what the cache books against what the GPUs have.
type Collector struct{ c *Cache }

// NewCollector returns a Prometheus collector over c.
func NewCollector(c *Cache) *Collector { return &Collector{c: c} }

// Describe implements prometheus.Collector.
func (x *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- capacityDesc
	ch <- bookedDesc
	ch <- claimedDesc
	ch <- computeDesc
	ch <- refusedDesc
	ch <- editedDesc
}

// Collect implements prometheus.Collector.
func (x *Collector) Collect(ch chan<- prometheus.Metric) {
	states, claimed, refused, edited := x.c.booked()
	ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.GaugeValue, float64(refused))
	ch <- prometheus.MustNewConstMetric(editedDesc, prometheus.GaugeValue, float64(edited))
	for _, s := range states {
		for i, g := range s.Node.GPUs {
			idx := strconv.Itoa(i)
			u := s.GPUs[i]
			ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(g.MemoryMiB)*(1<<20), s.Node.Name, idx, g.Model)
			ch <- prometheus.MustNewConstMetric(bookedDesc, prometheus.GaugeValue, float64(u.MemoryMiB)*(1<<20), s.Node.Name, idx)
			var claimedMiB int64
			if per := claimed[s.Node.Name]; i < len(per) {
				claimedMiB = per[i]
			}
			ch <- prometheus.MustNewConstMetric(claimedDesc, prometheus.GaugeValue, float64(claimedMiB)*(1<<20), s.Node.Name, idx)
			ch <- prometheus.MustNewConstMetric(computeDesc, prometheus.GaugeValue, float64(u.Compute)/float64(alloc.FullCompute), s.Node.Name, idx)
		}
	}
}
