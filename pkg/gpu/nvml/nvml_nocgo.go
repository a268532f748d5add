//go:build !cgo

package nvml

import (
	"errors"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// New fails: this binary was built without cgo.
func New() (gpu.Backend, error) {
	return nil, errors.New("NVML needs a binary built with cgo (CGO_ENABLED=1)")
}
