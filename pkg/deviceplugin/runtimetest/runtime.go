// Package runtimetest applies CDI devices to a container as a container
// runtime does, through the CDI project's own library (which containerd
// and CRI-O use), so that tests check what a container really gets from
// the device plugin's specs.
package runtimetest

import (
	"fmt"
	"strings"
	"sync"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// PodShm is the /dev/shm a container of a pod has before CDI devices are
// applied: the pod sandbox's, as containerd mounts it.
const PodShm = "/run/containerd/sandboxes/pod/shm"

// Runtime resolves CDI devices from the specs in one directory.
type Runtime struct {
	mu    sync.Mutex
	cache *cdi.Cache
}

// New returns a runtime reading CDI specs from dir.
func New(dir string) (*Runtime, error) {
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, err
	}
	return &Runtime{cache: c}, nil
}

// Container is what a container gets.
type Container struct {
	// Env is its environment.
	Env map[string]string
	// Mounts maps each mount's path in the container to its source.
	Mounts map[string]string
}

// Create applies devices to a new container, as the runtime does when the
// kubelet creates it with these CDI devices, and returns what it gets.
func (r *Runtime) Create(devices []string) (*Container, error) {
	spec := &oci.Spec{
		Process: &oci.Process{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
		Mounts: []oci.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev/shm", Type: "bind", Source: PodShm, Options: []string{"rbind", "ro"}},
		},
	}
	r.mu.Lock()
	// The specs were written just now: rescan, as a runtime's watch would.
	err := r.cache.Refresh()
	if err == nil {
		_, err = r.cache.InjectDevices(spec, devices...)
	}
	r.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("applying CDI devices %v: %w", devices, err)
	}
	c := &Container{Env: map[string]string{}, Mounts: map[string]string{}}
	for _, kv := range spec.Process.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			c.Env[k] = v
		}
	}
	for _, m := range spec.Mounts {
		if _, dup := c.Mounts[m.Destination]; dup {
			return nil, fmt.Errorf("two mounts at %s", m.Destination)
		}
		c.Mounts[m.Destination] = m.Source
	}
	return c, nil
}
