// Package nvml is the NVML GPU backend. It loads libnvidia-ml.so.1 at run
// time (github.com/NVIDIA/go-nvml), so binaries build without a driver and
// New says clearly when there is none. It needs cgo; without cgo New
// returns an error.
package nvml
