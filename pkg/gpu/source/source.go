// Package source opens the GPUs a node daemon serves: the machine's,
// through NVML, or simulated ones described in a file.
package source

import (
	"fmt"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpu/nvml"
	"github.com/gpushare/gpushare/pkg/gpu/sim"
)

// Open returns the machine's GPUs through NVML where simFile is empty,
// else the simulated GPUs simFile describes, their UUIDs prefixed with
// GPU-sim-<node> unless it says otherwise.
func Open(simFile, node string) (gpu.Backend, error) {
	if simFile == "" {
		return nvml.New()
	}
	cfg, err := sim.LoadFile(simFile)
	if err != nil {
		return nil, err
	}
	if cfg.UUIDPrefix == "" {
		cfg.UUIDPrefix = "GPU-sim-" + node
	}
	b, err := sim.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", simFile, err)
	}
	return b, nil
}
