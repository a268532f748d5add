//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// Backend reads GPUs through NVML.
type Backend struct {
	mu sync.Mutex
	// unhealthy holds the UUIDs of GPUs that had a critical XID error.
	unhealthy map[string]string
}

var _ gpu.Backend = (*Backend)(nil)

// New initialises NVML.
func New() (gpu.Backend, error) {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialising NVML (is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path?): %s", nvml.ErrorString(ret))
	}
	return &Backend{unhealthy: map[string]string{}}, nil
}

func check(what string, ret nvml.Return) error {
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML %s: %s", what, nvml.ErrorString(ret))
	}
	return nil
}

// Devices implements gpu.Backend.
func (b *Backend) Devices() ([]gpu.Device, error) {
	n, ret := nvml.DeviceGetCount()
	if err := check("device count", ret); err != nil {
		return nil, err
	}
	devs := make([]gpu.Device, 0, n)
	busToIndex := map[string]int{}
	handles := make([]nvml.Device, n)
	for i := range n {
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if err := check(fmt.Sprintf("device %d", i), ret); err != nil {
			return nil, err
		}
		handles[i] = h
		uuid, ret := h.GetUUID()
		if err := check(fmt.Sprintf("device %d UUID", i), ret); err != nil {
			return nil, err
		}
		name, _ := h.GetName()
		mem, ret := h.GetMemoryInfo()
		if err := check(fmt.Sprintf("device %d memory", i), ret); err != nil {
			return nil, err
		}
		d := gpu.Device{Index: i, UUID: uuid, Model: name, MemoryMiB: int64(mem.Total >> 20), NUMANode: -1, Healthy: true}
		if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
			bus := busID(pci.BusId)
			busToIndex[bus] = i
			d.NUMANode = numaNode(bus)
		}
		b.mu.Lock()
		_, bad := b.unhealthy[uuid]
		b.mu.Unlock()
		d.Healthy = !bad
		devs = append(devs, d)
	}
	// NVLink peers: the PCI bus at the far end of each active link.
	for i, h := range handles {
		seen := map[int]bool{}
		for link := range nvml.NVLINK_MAX_LINKS {
			state, ret := h.GetNvLinkState(link)
			if ret != nvml.SUCCESS || state != nvml.FEATURE_ENABLED {
				continue
			}
			remote, ret := h.GetNvLinkRemotePciInfo(link)
			if ret != nvml.SUCCESS {
				continue
			}
			if j, ok := busToIndex[busID(remote.BusId)]; ok && j != i && !seen[j] {
				seen[j] = true
				devs[i].NVLinkPeers = append(devs[i].NVLinkPeers, j)
			}
		}
	}
	return devs, nil
}

// busID turns NVML's bus id ("00000000:17:00.0") into sysfs form
// ("0000:17:00.0").
func busID(raw [32]int8) string {
	var s strings.Builder
	for _, c := range raw {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	id := strings.ToLower(s.String())
	if len(id) > 12 {
		id = id[len(id)-12:]
	}
	return id
}

// numaNode reads the NUMA node of a PCI device from sysfs; -1 if unknown.
func numaNode(bus string) int {
	b, err := os.ReadFile(filepath.Join("/sys/bus/pci/devices", bus, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// Usage implements gpu.Backend.
func (b *Backend) Usage() ([]gpu.Usage, error) {
	n, ret := nvml.DeviceGetCount()
	if err := check("device count", ret); err != nil {
		return nil, err
	}
	out := make([]gpu.Usage, 0, n)
	for i := range n {
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if err := check(fmt.Sprintf("device %d", i), ret); err != nil {
			return nil, err
		}
		uuid, _ := h.GetUUID()
		u := gpu.Usage{UUID: uuid}
		if r, ret := h.GetUtilizationRates(); ret == nvml.SUCCESS {
			u.UtilizationPercent = int(r.Gpu)
		}
		if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			u.UsedMemoryMiB = int64(m.Used >> 20)
		}
		if t, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			u.TemperatureC = int(t)
		}
		if p, ret := h.GetPowerUsage(); ret == nvml.SUCCESS {
			u.PowerWatts = float64(p) / 1000
		}
		if procs, ret := h.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
			for _, p := range procs {
				u.Processes = append(u.Processes, gpu.Process{PID: int(p.Pid), UsedMemoryMiB: int64(p.UsedGpuMemory >> 20)})
			}
		}
		out = append(out, u)
	}
	return out, nil
}

// Watch implements gpu.Backend: critical XID errors mark the GPU
// unhealthy.
func (b *Backend) Watch(ctx context.Context, events chan<- gpu.Event) error {
	set, ret := nvml.EventSetCreate()
	if err := check("event set", ret); err != nil {
		return err
	}
	defer func() { _ = set.Free() }()
	n, ret := nvml.DeviceGetCount()
	if err := check("device count", ret); err != nil {
		return err
	}
	for i := range n {
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		// Some GPUs do not support XID events; their health then
		// comes from their presence alone.
		_ = h.RegisterEvents(uint64(nvml.EventTypeXidCriticalError), set)
	}
	for ctx.Err() == nil {
		data, ret := set.Wait(1000)
		if ret == nvml.ERROR_TIMEOUT {
			continue
		}
		if ret != nvml.SUCCESS || data.EventType != uint64(nvml.EventTypeXidCriticalError) {
			continue
		}
		if ignoredXID(data.EventData) {
			continue
		}
		uuid, _ := data.Device.GetUUID()
		reason := fmt.Sprintf("XID %d", data.EventData)
		b.mu.Lock()
		b.unhealthy[uuid] = reason
		b.mu.Unlock()
		select {
		case events <- gpu.Event{UUID: uuid, Healthy: false, Reason: reason}:
		case <-ctx.Done():
		}
	}
	return nil
}

// ignoredXID reports XIDs caused by the application, not the GPU (the
// list the NVIDIA device plugin skips: 13 graphics engine exception, 31
// memory page fault, 43 GPU stopped processing, 45 preemptive cleanup, 68
// video processor exception).
func ignoredXID(xid uint64) bool {
	switch xid {
	case 13, 31, 43, 45, 68:
		return true
	}
	return false
}

// Close implements gpu.Backend.
func (b *Backend) Close() error { return check("shutdown", nvml.Shutdown()) }
