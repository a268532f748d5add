package alloc

import "errors"

// errNoWorkload is the error of a policy built without the workload it
// weighs.
var errNoWorkload = errors.New("the fragmentation-aware policy needs a workload of pod shapes")

// NeedsWorkload reports whether c's node or GPU policy weighs a workload
// of pod shapes (Options.Workload): the fragmentation-aware ones. Unknown
// names need none (NewPlacer rejects them).
func NeedsWorkload(c Config) bool {
	gpu := c.GPU
	if gpu == "" {
		gpu = c.Node
	}
	var o Options
	if nf, ok := nodePolicies[c.Node]; ok {
		if _, err := nf(o); errors.Is(err, errNoWorkload) {
			return true
		}
	}
	if gf, ok := gpuPolicies[gpu]; ok {
		if _, err := gf(o); errors.Is(err, errNoWorkload) {
			return true
		}
	}
	return false
}
