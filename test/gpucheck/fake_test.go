//go:build gpucheck

package gpucheck

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// fakeGPU is a GPU of the fake driver, as NVML reports it.
type fakeGPU struct {
	uuid, name string
	// total and reserved are bytes; reserved < 0: a driver that does not
	// report it (no GetMemoryInfo_v2).
	total    uint64
	reserved int64
	// bus is the PCI bus ID in NVML's form ("00000000:17:00.0").
	bus string
	// links are the indexes of the GPUs at the far end of its active
	// NVLinks, one per link.
	links []int
}

// fakeDriver is the fake's driver version.
const fakeDriver = "575.57.08-fake"

// fakeGPUs are the fake machine: two NVLinked H100s and an L4 whose
// driver does not report its reserved memory. UUIDs are new each run;
// bus IDs are this machine's first PCI devices where it has three, so
// that the backend reads their NUMA node from sysfs.
func fakeGPUs() []fakeGPU {
	bus := []string{"00000000:17:00.0", "00000000:2A:00.0", "00000000:3D:00.0"}
	if ids, err := os.ReadDir("/sys/bus/pci/devices"); err == nil && len(ids) >= 3 {
		for i := range bus {
			// sysfs "0000:00:02.0" is NVML's "00000000:00:02.0".
			bus[i] = "0000" + strings.ToUpper(ids[i].Name())
		}
	}
	return []fakeGPU{
		{uuid: newUUID(), name: "NVIDIA H100 80GB HBM3", total: 81559<<20 + 12345, reserved: 330<<20 + 678, bus: bus[0], links: []int{1, 1, 1, 1}},
		{uuid: newUUID(), name: "NVIDIA H100 80GB HBM3", total: 81559<<20 + 12345, reserved: 331 << 20, bus: bus[1], links: []int{0, 0, 0, 0}},
		{uuid: newUUID(), name: "NVIDIA L4", total: 23034 << 20, reserved: -1, bus: bus[2]},
	}
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// fakeNVML is go-nvml's mock NVML over fake GPUs. What processes use is
// what the stand-in CUDA processes tell it: one file per live process in
// state, "UUID MiB". XIDs sent to xids come out of event sets.
type fakeNVML struct {
	lib   *mock.Interface
	gpus  []fakeGPU
	devs  []*mock.Device
	state string
	xids  chan nvml.EventData
}

func newFakeNVML(gpus []fakeGPU, state string) (*fakeNVML, error) {
	if err := os.MkdirAll(state, 0o755); err != nil { //nolint:gosec // the stand-ins write here
		return nil, err
	}
	f := &fakeNVML{gpus: gpus, state: state, xids: make(chan nvml.EventData, 16)}
	for i := range gpus {
		f.devs = append(f.devs, f.device(i))
	}
	f.lib = &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return fakeDriver, nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(f.devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(f.devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return f.devs[i], nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) {
			return &mock.EventSet{
				WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
					select {
					case e := <-f.xids:
						return e, nvml.SUCCESS
					case <-time.After(time.Duration(ms) * time.Millisecond):
						return nvml.EventData{}, nvml.ERROR_TIMEOUT
					}
				},
				FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			}, nvml.SUCCESS
		},
	}
	return f, nil
}

// device is GPU i as the mock answers for it.
func (f *fakeNVML) device(i int) *mock.Device {
	g := f.gpus[i]
	pci := func(bus string) nvml.PciInfo {
		var p nvml.PciInfo
		for j, c := range bus {
			p.BusId[j] = int8(c)
		}
		return p
	}
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return g.uuid, nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return g.name, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			used := uint64(f.used(g.uuid)) << 20
			return nvml.Memory{Total: g.total, Used: used, Free: g.total - used}, nvml.SUCCESS
		},
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			if g.reserved < 0 {
				return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED
			}
			used := uint64(f.used(g.uuid)) << 20
			return nvml.Memory_v2{Total: g.total, Reserved: uint64(g.reserved), Used: used,
				Free: g.total - uint64(g.reserved) - used}, nvml.SUCCESS
		},
		GetPciInfoFunc:     func() (nvml.PciInfo, nvml.Return) { return pci(g.bus), nvml.SUCCESS },
		GetMinorNumberFunc: func() (int, nvml.Return) { return i, nvml.SUCCESS },
		GetNvLinkStateFunc: func(link int) (nvml.EnableState, nvml.Return) {
			if link < len(g.links) {
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		},
		GetNvLinkRemotePciInfoFunc: func(link int) (nvml.PciInfo, nvml.Return) {
			if link >= len(g.links) {
				return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
			}
			return pci(f.gpus[g.links[link]].bus), nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			// Busy while a stand-in process "computes" on it.
			if len(f.processes(g.uuid)) > 0 {
				return nvml.Utilization{Gpu: 100, Memory: 30}, nvml.SUCCESS
			}
			return nvml.Utilization{}, nvml.SUCCESS
		},
		GetTemperatureFunc: func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 41, nvml.SUCCESS },
		GetPowerUsageFunc:  func() (uint32, nvml.Return) { return 72000, nvml.SUCCESS },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return f.processes(g.uuid), nvml.SUCCESS
		},
		GetSupportedEventTypesFunc: func() (uint64, nvml.Return) {
			return uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError), nvml.SUCCESS
		},
		RegisterEventsFunc: func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
	}
}

// processes are the live stand-in processes on the GPU.
func (f *fakeNVML) processes(uuid string) []nvml.ProcessInfo {
	entries, err := os.ReadDir(f.state)
	if err != nil {
		return nil
	}
	var out []nvml.ProcessInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || syscall.Kill(pid, 0) != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(f.state, e.Name()))
		if err != nil {
			continue
		}
		var on string
		var mib uint64
		if _, err := fmt.Sscan(string(b), &on, &mib); err != nil || on != uuid {
			continue
		}
		out = append(out, nvml.ProcessInfo{Pid: uint32(pid), UsedGpuMemory: mib << 20}) //nolint:gosec // a PID
	}
	return out
}

// used is the MiB the stand-in processes hold on the GPU.
func (f *fakeNVML) used(uuid string) int64 {
	var mib int64
	for _, p := range f.processes(uuid) {
		mib += int64(p.UsedGpuMemory >> 20) //nolint:gosec // MiB fit
	}
	return mib
}

// injectXIDs sends an application's XID (13, which the backend ignores)
// on the first GPU and a critical one (79, fallen off the bus) on the
// last, and returns what it sent and what the health stream must report:
// the last GPU unhealthy.
func (f *fakeNVML) injectXIDs() (sent []string, want []gpu.Event) {
	first, last := 0, len(f.devs)-1
	for _, x := range []struct {
		gpu int
		xid uint64
	}{{first, 13}, {last, 79}} {
		f.xids <- nvml.EventData{Device: f.devs[x.gpu], EventType: uint64(nvml.EventTypeXidCriticalError), EventData: x.xid}
		sent = append(sent, fmt.Sprintf("%s: XID %d", f.gpus[x.gpu].uuid, x.xid))
	}
	return sent, []gpu.Event{{UUID: f.gpus[last].uuid, Healthy: false, Reason: "XID 79"}}
}

// writeSMI writes a stand-in nvidia-smi into dir that answers the
// inventory check's two questions for the fake GPUs as nvidia-smi
// would, and returns its path.
func (f *fakeNVML) writeSMI(dir string) (string, error) {
	var csv strings.Builder
	for i, g := range f.gpus {
		reserved := "[N/A]"
		if g.reserved >= 0 {
			reserved = strconv.FormatInt(g.reserved>>20, 10)
		}
		fmt.Fprintf(&csv, "%d, %s, %s, %s, %d, %s, %s\n", i, g.uuid, g.name, fakeDriver, g.total>>20, reserved, g.bus)
	}
	var topo strings.Builder
	// nvidia-smi underlines the header.
	topo.WriteString("\t\x1b[4m")
	for i := range f.gpus {
		fmt.Fprintf(&topo, "GPU%d\t", i)
	}
	topo.WriteString("CPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n")
	for i, g := range f.gpus {
		fmt.Fprintf(&topo, "GPU%d\t", i)
		for j := range f.gpus {
			switch n := count(g.links, j); {
			case i == j:
				topo.WriteString(" X \t")
			case n > 0:
				fmt.Fprintf(&topo, "NV%d\t", n)
			default:
				topo.WriteString("SYS\t")
			}
		}
		topo.WriteString("0-1\t0\t\tN/A\n")
	}
	topo.WriteString("\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n" +
		"  NV#  = Connection traversing a bonded set of # NVLinks\n")
	query := filepath.Join(dir, "nvidia-smi-query.csv")
	topoFile := filepath.Join(dir, "nvidia-smi-topo.txt")
	script := fmt.Sprintf(`#!/usr/bin/env bash
# A stand-in for nvidia-smi over gpu-check's fake GPUs.
case "$*" in
"--query-gpu=%s --format=csv,noheader,nounits") cat %q ;;
"topo -m") cat %q ;;
*) echo "stand-in nvidia-smi: unknown arguments: $*" >&2; exit 2 ;;
esac
`, strings.Join(smiFields, ","), query, topoFile)
	path := filepath.Join(dir, "nvidia-smi")
	for name, content := range map[string]string{query: csv.String(), topoFile: topo.String()} {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil { //nolint:gosec // read by the stand-in
			return "", err
		}
	}
	return path, os.WriteFile(path, []byte(script), 0o755) //nolint:gosec // the stand-in
}

func count(links []int, j int) int {
	n := 0
	for _, l := range links {
		if l == j {
			n++
		}
	}
	return n
}
