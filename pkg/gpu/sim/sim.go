// Package sim is a simulated GPU backend: GPUs described by a file (or
// built in code), usage and failures set by the file or by tests. The node
// daemon runs over it exactly as over NVML.
package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// Config describes simulated GPUs (file format: YAML or JSON).
//
//	uuidPrefix: GPU-sim-node-1
//	gpus:
//	- {model: NVIDIA H200, memoryMiB: 143771, count: 8, numaNodes: 2, nvlink: all}
//	usage:
//	- {index: 0, utilizationPercent: 40, usedMemoryMiB: 20480, processes: [{pid: 4242, usedMemoryMiB: 20480}]}
//	failures:
//	- {index: 3, after: 30s, xid: 79}
type Config struct {
	// UUIDPrefix starts every GPU's UUID; "GPU-sim" if empty. Give each
	// simulated node its own, as real GPU UUIDs are unique.
	UUIDPrefix string    `json:"uuidPrefix,omitempty"`
	GPUs       []Group   `json:"gpus"`
	Usage      []Load    `json:"usage,omitempty"`
	Failures   []Failure `json:"failures,omitempty"`
	// DeviceDir, if set, holds a stand-in character device per GPU,
	// nvidia<index> (made by whoever runs the simulation, e.g. with the
	// major and minor numbers of /dev/null): the GPUs' DeviceNode, which
	// the CDI specs hand containers.
	DeviceDir string `json:"deviceDir,omitempty"`
}

// Group is Count identical GPUs, indexed after the previous groups'.
type Group struct {
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	// UsableMemoryMiB is what processes can allocate, as NVML reports
	// it beside the driver's reservation; 0 (default) for all of it.
	UsableMemoryMiB int64 `json:"usableMemoryMiB,omitempty"`
	Count           int   `json:"count"`
	// NUMANodes spreads the group evenly over this many NUMA nodes
	// (0 or 1: all on node 0).
	NUMANodes int `json:"numaNodes,omitempty"`
	// NVLink is "all" (every GPU of the group joined), "pairs" (0-1,
	// 2-3, ...) or "none" (default).
	NVLink string `json:"nvlink,omitempty"`
}

// Load is one GPU's simulated usage.
type Load struct {
	Index              int           `json:"index"`
	UtilizationPercent int           `json:"utilizationPercent,omitempty"`
	UsedMemoryMiB      int64         `json:"usedMemoryMiB,omitempty"`
	TemperatureC       int           `json:"temperatureC,omitempty"`
	PowerWatts         float64       `json:"powerWatts,omitempty"`
	Processes          []gpu.Process `json:"processes,omitempty"`
}

// Failure makes a GPU unhealthy After the backend starts.
type Failure struct {
	Index int      `json:"index"`
	After Duration `json:"after,omitempty"`
	XID   int      `json:"xid"`
}

// Duration is a time.Duration written as "30s".
type Duration struct{ time.Duration }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := yaml.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// LoadFile reads a Config file; unknown fields are errors.
func LoadFile(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// Backend is the simulated gpu.Backend. Tests change it with SetHealth and
// SetUsage.
type Backend struct {
	mu       sync.Mutex
	devices  []gpu.Device
	usage    []gpu.Usage
	failures []Failure
	watchers []chan<- gpu.Event
	start    time.Time
}

var _ gpu.Backend = (*Backend)(nil)

// New builds a backend from c, which it validates.
func New(c *Config) (*Backend, error) {
	b := &Backend{start: time.Now()}
	prefix := c.UUIDPrefix
	if prefix == "" {
		prefix = "GPU-sim"
	}
	for gi, g := range c.GPUs {
		if g.Count <= 0 || g.MemoryMiB <= 0 || g.Model == "" {
			return nil, fmt.Errorf("gpus[%d]: model, a positive memoryMiB and a positive count are required", gi)
		}
		if g.UsableMemoryMiB < 0 || g.UsableMemoryMiB > g.MemoryMiB {
			return nil, fmt.Errorf("gpus[%d]: usableMemoryMiB must be within 0-%d MiB", gi, g.MemoryMiB)
		}
		first := len(b.devices)
		for i := range g.Count {
			d := gpu.Device{Index: first + i, UUID: fmt.Sprintf("%s-%04d-%04d", prefix, gi, i), Model: g.Model,
				MemoryMiB: g.MemoryMiB, UsableMemoryMiB: g.UsableMemoryMiB, Healthy: true}
			if c.DeviceDir != "" {
				d.DeviceNode = filepath.Join(c.DeviceDir, fmt.Sprintf("nvidia%d", d.Index))
			}
			if g.NUMANodes > 1 {
				d.NUMANode = i * g.NUMANodes / g.Count
			}
			switch g.NVLink {
			case "all":
				for j := range g.Count {
					if j != i {
						d.NVLinkPeers = append(d.NVLinkPeers, first+j)
					}
				}
			case "pairs":
				if p := i ^ 1; p < g.Count {
					d.NVLinkPeers = []int{first + p}
				}
			case "", "none":
			default:
				return nil, fmt.Errorf("gpus[%d].nvlink: %q is not all, pairs or none", gi, g.NVLink)
			}
			b.devices = append(b.devices, d)
			b.usage = append(b.usage, gpu.Usage{UUID: d.UUID, TemperatureC: 35})
		}
	}
	for i, l := range c.Usage {
		if l.Index < 0 || l.Index >= len(b.devices) {
			return nil, fmt.Errorf("usage[%d].index: no GPU %d", i, l.Index)
		}
		if err := b.SetUsage(l); err != nil {
			return nil, fmt.Errorf("usage[%d]: %w", i, err)
		}
	}
	for i, f := range c.Failures {
		if f.Index < 0 || f.Index >= len(b.devices) {
			return nil, fmt.Errorf("failures[%d].index: no GPU %d", i, f.Index)
		}
	}
	b.failures = c.Failures
	return b, nil
}

// Devices implements gpu.Backend.
func (b *Backend) Devices() ([]gpu.Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failDueLocked()
	out := make([]gpu.Device, len(b.devices))
	for i, d := range b.devices {
		d.NVLinkPeers = append([]int(nil), d.NVLinkPeers...)
		out[i] = d
	}
	return out, nil
}

// Usage implements gpu.Backend.
func (b *Backend) Usage() ([]gpu.Usage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]gpu.Usage, len(b.usage))
	for i, u := range b.usage {
		u.Processes = append([]gpu.Process(nil), u.Processes...)
		out[i] = u
	}
	return out, nil
}

// SetUsage replaces one GPU's usage.
func (b *Backend) SetUsage(l Load) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l.Index < 0 || l.Index >= len(b.devices) {
		return fmt.Errorf("no GPU %d", l.Index)
	}
	d := b.devices[l.Index]
	if l.UsedMemoryMiB < 0 || l.UsedMemoryMiB > d.MemoryMiB || l.UtilizationPercent < 0 || l.UtilizationPercent > 100 {
		return fmt.Errorf("GPU %d: usage must be within 0-100%% and 0-%d MiB", l.Index, d.MemoryMiB)
	}
	temp := l.TemperatureC
	if temp == 0 {
		temp = 35
	}
	b.usage[l.Index] = gpu.Usage{UUID: d.UUID, UtilizationPercent: l.UtilizationPercent, UsedMemoryMiB: l.UsedMemoryMiB,
		TemperatureC: temp, PowerWatts: l.PowerWatts, Processes: append([]gpu.Process(nil), l.Processes...)}
	return nil
}

// SetHealth marks a GPU healthy or not and tells the watchers, as an XID
// event or a vanished GPU would.
func (b *Backend) SetHealth(index int, healthy bool, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if index < 0 || index >= len(b.devices) {
		return fmt.Errorf("no GPU %d", index)
	}
	b.setHealthLocked(index, healthy, reason)
	return nil
}

func (b *Backend) setHealthLocked(index int, healthy bool, reason string) {
	d := &b.devices[index]
	if d.Healthy == healthy {
		return
	}
	d.Healthy = healthy
	ev := gpu.Event{UUID: d.UUID, Healthy: healthy, Reason: reason}
	for _, w := range b.watchers {
		select {
		case w <- ev:
		default:
			// A watcher that does not keep up reads Devices again.
		}
	}
}

// failDueLocked applies the configured failures whose time has come.
func (b *Backend) failDueLocked() {
	rest := b.failures[:0]
	for _, f := range b.failures {
		if time.Since(b.start) >= f.After.Duration {
			b.setHealthLocked(f.Index, false, fmt.Sprintf("XID %d", f.XID))
			continue
		}
		rest = append(rest, f)
	}
	b.failures = rest
}

// Watch implements gpu.Backend.
func (b *Backend) Watch(ctx context.Context, events chan<- gpu.Event) error {
	b.mu.Lock()
	b.watchers = append(b.watchers, events)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		for i, w := range b.watchers {
			if w == events {
				b.watchers = append(b.watchers[:i], b.watchers[i+1:]...)
				break
			}
		}
		b.mu.Unlock()
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return ctx.Err()
		case <-tick.C:
			b.mu.Lock()
			b.failDueLocked()
			b.mu.Unlock()
		}
	}
}

// Close implements gpu.Backend.
func (b *Backend) Close() error { return nil }
