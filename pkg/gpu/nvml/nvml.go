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
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// Backend reads GPUs through NVML.
type Backend struct {
	lib nvml.Interface
	// poll is how often Watch checks that every GPU still answers.
	poll time.Duration

	mu sync.Mutex
	// unhealthy says why each GPU that had a critical XID error, or that
	// stopped answering, is unhealthy: until the daemon restarts.
	unhealthy map[string]string
	// known are the GPUs as last listed, in index order: one that stops
	// answering keeps its place, unhealthy.
	known []gpu.Device
}

var _ gpu.Backend = (*Backend)(nil)

// New initialises NVML.
func New() (gpu.Backend, error) { return newBackend(nvml.New()) }

func newBackend(lib nvml.Interface) (*Backend, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialising NVML (is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path?): %s", nvml.ErrorString(ret))
	}
	return &Backend{lib: lib, poll: 5 * time.Second, unhealthy: map[string]string{}}, nil
}

func check(what string, ret nvml.Return) error {
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML %s: %s", what, nvml.ErrorString(ret))
	}
	return nil
}

// Devices implements gpu.Backend. A GPU listed before that now answers as
// one gone (NVML's "GPU is lost" when it fell off the bus) or that the
// driver no longer lists is listed as before, unhealthy: it vanished.
// (Left out if the driver numbered the GPUs anew without it.)
func (b *Backend) Devices() ([]gpu.Device, error) {
	n, ret := b.lib.DeviceGetCount()
	if err := check("device count", ret); err != nil {
		return nil, err
	}
	b.mu.Lock()
	known := b.known
	b.mu.Unlock()
	devs := make([]gpu.Device, 0, max(n, len(known)))
	handles := make([]nvml.Device, 0, cap(devs))
	seen := map[string]bool{}
	for i := range n {
		d, h, ret, err := b.device(i)
		if err != nil {
			// Only a GPU that answered before and now answers as one
			// gone vanished; other errors may pass.
			if !gone(ret) || i >= len(known) || known[i].Index != i {
				return nil, err
			}
			d, h = known[i], nil
			d.NVLinkPeers = nil
			b.lose(d.UUID, "vanished: "+err.Error())
		}
		seen[d.UUID] = true
		devs, handles = append(devs, d), append(handles, h)
	}
	for _, k := range known {
		if seen[k.UUID] {
			continue
		}
		b.lose(k.UUID, "vanished: the driver no longer lists it")
		if k.Index < n {
			// The driver numbered the GPUs anew without it, and its
			// index is another's now: it is left out.
			continue
		}
		k.NVLinkPeers = nil
		devs, handles = append(devs, k), append(handles, nil)
	}
	peers(devs, handles)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range devs {
		_, bad := b.unhealthy[devs[i].UUID]
		devs[i].Healthy = !bad
	}
	b.known = devs
	return devs, nil
}

// device reads GPU i; on failure, it returns NVML's answer too.
func (b *Backend) device(i int) (gpu.Device, nvml.Device, nvml.Return, error) {
	h, ret := b.lib.DeviceGetHandleByIndex(i)
	if err := check(fmt.Sprintf("device %d", i), ret); err != nil {
		return gpu.Device{}, nil, ret, err
	}
	uuid, ret := h.GetUUID()
	if err := check(fmt.Sprintf("device %d UUID", i), ret); err != nil {
		return gpu.Device{}, nil, ret, err
	}
	mem, ret := h.GetMemoryInfo()
	if err := check(fmt.Sprintf("device %d memory", i), ret); err != nil {
		return gpu.Device{}, nil, ret, err
	}
	name, _ := h.GetName()
	d := gpu.Device{Index: i, UUID: uuid, Model: name, MemoryMiB: int64(mem.Total >> 20), NUMANode: -1, Healthy: true}
	// Drivers that report it (R510 and later) say how much of the memory
	// they and the firmware reserve: processes can allocate the rest.
	if v2, ret := h.GetMemoryInfo_v2(); ret == nvml.SUCCESS && v2.Total > 0 && v2.Reserved < v2.Total {
		d.MemoryMiB, d.UsableMemoryMiB = int64(v2.Total>>20), int64((v2.Total-v2.Reserved)>>20)
	}
	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		d.NUMANode = numaNode(busID(pci.BusId))
	}
	if minor, ret := h.GetMinorNumber(); ret == nvml.SUCCESS && minor >= 0 {
		d.DeviceNode = fmt.Sprintf("/dev/nvidia%d", minor)
	}
	return d, h, nvml.SUCCESS, nil
}

// gone reports whether NVML answers as for a GPU that is no longer
// there: fallen off the bus, or needing a reset to come back.
func gone(ret nvml.Return) bool {
	switch ret {
	case nvml.ERROR_GPU_IS_LOST, nvml.ERROR_NOT_FOUND, nvml.ERROR_GPU_NOT_FOUND, nvml.ERROR_RESET_REQUIRED:
		return true
	}
	return false
}

// lose marks the GPU unhealthy, unless it is already.
func (b *Backend) lose(uuid, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.unhealthy[uuid]; !ok {
		b.unhealthy[uuid] = reason
	}
}

// peers fills in the NVLink peers of devs, each read through its handle
// (nil for a GPU that does not answer): the PCI bus at the far end of
// each active link.
func peers(devs []gpu.Device, handles []nvml.Device) {
	busToIndex := map[string]int{}
	for i, h := range handles {
		if h == nil {
			continue
		}
		if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
			busToIndex[busID(pci.BusId)] = i
		}
	}
	for i, h := range handles {
		if h == nil {
			continue
		}
		devs[i].NVLinkPeers = nil
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
				devs[i].NVLinkPeers = append(devs[i].NVLinkPeers, devs[j].Index)
			}
		}
	}
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

// Usage implements gpu.Backend. A GPU that does not answer is left out.
func (b *Backend) Usage() ([]gpu.Usage, error) {
	n, ret := b.lib.DeviceGetCount()
	if err := check("device count", ret); err != nil {
		return nil, err
	}
	out := make([]gpu.Usage, 0, n)
	for i := range n {
		h, ret := b.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
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

// Watch implements gpu.Backend: a critical XID error marks the GPU
// unhealthy, and so does a GPU that stops answering, checked every poll
// (a GPU that falls off the bus may send no event).
func (b *Backend) Watch(ctx context.Context, events chan<- gpu.Event) error {
	set, ret := b.lib.EventSetCreate()
	if err := check("event set", ret); err != nil {
		return err
	}
	defer func() { _ = set.Free() }()
	n, ret := b.lib.DeviceGetCount()
	if err := check("device count", ret); err != nil {
		return err
	}
	for i := range n {
		h, ret := b.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		// Some GPUs do not support XID events; their health then
		// comes from their answering alone.
		_ = h.RegisterEvents(uint64(nvml.EventTypeXidCriticalError), set)
	}
	// told holds the GPUs reported unhealthy to events.
	told := map[string]bool{}
	tell := func(uuid, reason string) {
		if told[uuid] {
			return
		}
		told[uuid] = true
		select {
		case events <- gpu.Event{UUID: uuid, Healthy: false, Reason: reason}:
		case <-ctx.Done():
		}
	}
	next := time.Now().Add(b.poll)
	for ctx.Err() == nil {
		if time.Now().After(next) {
			next = time.Now().Add(b.poll)
			if devs, err := b.Devices(); err == nil {
				for _, d := range devs {
					if !d.Healthy {
						tell(d.UUID, b.reason(d.UUID))
					}
				}
			}
		}
		data, ret := set.Wait(uint32(min(b.poll, time.Second).Milliseconds()))
		if ret != nvml.SUCCESS || data.EventType != uint64(nvml.EventTypeXidCriticalError) || ignoredXID(data.EventData) {
			continue
		}
		uuid, ret := data.Device.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		reason := fmt.Sprintf("XID %d", data.EventData)
		b.lose(uuid, reason)
		tell(uuid, reason)
	}
	return nil
}

// reason says why the GPU is unhealthy.
func (b *Backend) reason(uuid string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unhealthy[uuid]
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
func (b *Backend) Close() error { return check("shutdown", b.lib.Shutdown()) }
