package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// KubeVersion is the Kubernetes version the tools are built at.
const KubeVersion = "v1.37.2"

// Binaries the control plane runs.
var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"}

// ErrNoTools is returned by FindTools when the binaries are not built.
var ErrNoTools = errors.New("control plane binaries not built; run `make cluster-tools`")

// Tools is a directory of built control plane binaries.
type Tools struct {
	// Dir holds bin/ and stages/.
	Dir string
}

// DefaultToolsDir is where hack/cluster-tools.sh puts the binaries unless
// GPUSHARE_CLUSTER_TOOLS says otherwise. `make compat` points it at an
// older control plane built by hack/compat-tools.sh: that directory has
// the older kube-apiserver, kube-controller-manager and kube-scheduler,
// and links to these etcd, kubectl and kwok.
func DefaultToolsDir() string {
	if d := os.Getenv("GPUSHARE_CLUSTER_TOOLS"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "gpushare", "cluster-"+KubeVersion)
}

// FindTools checks that every binary is in dir (DefaultToolsDir if empty).
func FindTools(dir string) (Tools, error) {
	if dir == "" {
		dir = DefaultToolsDir()
	}
	t := Tools{Dir: dir}
	for _, b := range binaries {
		if _, err := os.Stat(t.Bin(b)); err != nil {
			return Tools{}, fmt.Errorf("%w: %s missing", ErrNoTools, t.Bin(b))
		}
	}
	if _, err := os.Stat(t.KwokStages()); err != nil {
		return Tools{}, fmt.Errorf("%w: %s missing", ErrNoTools, t.KwokStages())
	}
	return t, nil
}

// Bin returns the path of a binary.
func (t Tools) Bin(name string) string { return filepath.Join(t.Dir, "bin", name) }

// KwokStages returns the path of kwok's stage configuration.
func (t Tools) KwokStages() string { return filepath.Join(t.Dir, "stages", "kwok-stages.yaml") }
