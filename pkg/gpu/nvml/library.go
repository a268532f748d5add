//go:build cgo

package nvml

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// NewWithLibrary is New over lib, an NVML the caller holds: the driver's
// (nvml.New()), shared with code that calls NVML beside the backend, or
// go-nvml's mock, so that the backend's own code runs without a GPU
// (test/gpucheck runs the same checks over both).
func NewWithLibrary(lib nvml.Interface) (gpu.Backend, error) { return newBackend(lib) }
