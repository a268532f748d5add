package cache

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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
		"Pods whose allocation record books nothing: not bound, for another node, or unreadable.", nil, nil)
	unconformingDesc = prometheus.NewDesc("gpushare_allocation_records_unconforming",
		"Running pods whose allocation record is not what the pod asks (its request reads otherwise under the resource model now, or the record was written by hand): the record keeps booking the GPUs it names.", nil, nil)
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
	ch <- unconformingDesc
}

// Collect implements prometheus.Collector. It sends four gauges per
// GPU, 160,000 at 5000 nodes of 8, and keeps each scrape's garbage
// small: the gauges of a GPU share their labels, and the labels of a
// node or a GPU index are made once per scrape.
func (x *Collector) Collect(ch chan<- prometheus.Metric) {
	gpus, refused, edited, unconforming := x.c.samples()
	ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.GaugeValue, float64(refused))
	ch <- prometheus.MustNewConstMetric(editedDesc, prometheus.GaugeValue, float64(edited))
	ch <- prometheus.MustNewConstMetric(unconformingDesc, prometheus.GaugeValue, float64(unconforming))
	var (
		node    *dto.LabelPair
		indexes []*dto.LabelPair
		models  = map[string]*dto.LabelPair{}
	)
	gauges := make([]gauge, 4*len(gpus))
	for k := range gpus {
		g := &gpus[k]
		if node == nil || node.GetValue() != g.node {
			node = labelPair(&nodeLabel, g.node)
		}
		for len(indexes) <= g.index {
			indexes = append(indexes, labelPair(&gpuLabel, strconv.Itoa(len(indexes))))
		}
		model := models[g.model]
		if model == nil {
			model = labelPair(&modelLabel, g.model)
			models[g.model] = model
		}
		// In the order of the labels' names, as the registry checks.
		labels := []*dto.LabelPair{indexes[g.index], model, node}
		set := gauges[4*k : 4*k+4]
		set[0].set(capacityDesc, labels, float64(g.capacityMiB)*(1<<20))
		labels = []*dto.LabelPair{indexes[g.index], node}
		set[1].set(bookedDesc, labels, float64(g.booked.MemoryMiB)*(1<<20))
		set[2].set(claimedDesc, labels, float64(g.claimedMiB)*(1<<20))
		set[3].set(computeDesc, labels, float64(g.booked.Compute)/float64(alloc.FullCompute))
		for i := range set {
			ch <- &set[i]
		}
	}
}

// The labels of the per-GPU gauges.
var nodeLabel, gpuLabel, modelLabel = "node", "gpu", "model"

func labelPair(name *string, value string) *dto.LabelPair {
	return &dto.LabelPair{Name: name, Value: &value}
}

// gauge is one sample of a per-GPU gauge, read by the registry during
// one scrape: its labels may be shared with other gauges, and are never
// changed.
type gauge struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
	dto    dto.Gauge
}

func (g *gauge) set(desc *prometheus.Desc, labels []*dto.LabelPair, value float64) {
	g.desc, g.labels, g.value = desc, labels, value
}

// Desc implements prometheus.Metric.
func (g *gauge) Desc() *prometheus.Desc { return g.desc }

// Write implements prometheus.Metric.
func (g *gauge) Write(out *dto.Metric) error {
	g.dto.Value = &g.value
	out.Label, out.Gauge = g.labels, &g.dto
	return nil
}
