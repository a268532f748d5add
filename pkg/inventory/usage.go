package inventory

import (
	"time"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// UsageThreshold says how far live use must move before a new sample is
// worth a write of its own: load-aware scoring does not rank GPUs by
// differences smaller than these, and a write costs every watcher of the
// object an event.
type UsageThreshold struct {
	// UtilizationPercent is the least change of a GPU's utilisation,
	// in percentage points, that matters.
	UtilizationPercent int64
	// MemoryMiB is the least change of a GPU's used memory that matters.
	MemoryMiB int64
}

// DefaultUsageThreshold is what the node daemon uses: 10 points of
// utilisation or 512 MiB of memory on any GPU.
var DefaultUsageThreshold = UsageThreshold{UtilizationPercent: 10, MemoryMiB: 512}

// UsageRefresh is how often a node whose use does not change enough to
// matter still writes a fresh sample on its Node (the path of a daemon
// without a lease), well inside the age after which the scheduler drops a
// sample (pkg/cache LiveStaleAfter, 3 minutes).
const UsageRefresh = time.Minute

// Matters reports whether next differs from last by enough to be written
// at once: there was no last sample, the GPUs listed differ, or any GPU's
// utilisation or used memory moved by the threshold or more.
func (t UsageThreshold) Matters(last, next *gpusharev1.GPUUsage) bool {
	if last == nil || next == nil {
		return last != next
	}
	if len(last.GPUs) != len(next.GPUs) {
		return true
	}
	for i, a := range last.GPUs {
		b := next.GPUs[i]
		if a.Index != b.Index || abs(a.UtilizationPercent-b.UtilizationPercent) >= t.UtilizationPercent ||
			abs(a.UsedMemoryMiB-b.UsedMemoryMiB) >= t.MemoryMiB {
			return true
		}
	}
	return false
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
