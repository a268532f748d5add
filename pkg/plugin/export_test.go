package plugin

import (
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// LearnedMix is the mix the plugin's policy has learned.
func (pl *GPUShare) LearnedMix() []alloc.Shape { return pl.policy.Learner().Mix() }

// LearnedGPUPods is how many GPU pods the plugin's policy has learned.
func (pl *GPUShare) LearnedGPUPods() int64 { return pl.policy.Learner().Observed() }

// Waiting is the GPU demand of the pods the plugin's cache counts as
// waiting, in thousandths of a GPU.
func (pl *GPUShare) Waiting() int64 { return pl.cache.Waiting() }

// Sparing is what the policy's Placer keeps idle GPUs spare by, nil if
// it keeps none.
func (pl *GPUShare) Sparing() *alloc.Spare { return pl.policy.Placer().Spare() }

// Metrics are the plugin's gpushare_scheduler_idle_gpus_kept for its
// profile and gpushare_scheduler_gpu_demand_waiting, as scraped.
func (pl *GPUShare) Metrics() (kept, waiting float64) {
	return testutil.ToFloat64(pl.metrics.kept.WithLabelValues(pl.handle.ProfileName())), testutil.ToFloat64(waitingCollector(pl.cache.Waiting))
}

// KeptSeries is how many series gpushare_scheduler_idle_gpus_kept has.
func (pl *GPUShare) KeptSeries() int { return testutil.CollectAndCount(pl.metrics.kept) }
