// Package gpu describes a node's GPUs and what they are doing, behind one
// small interface with two backends: NVML (package gpu/nvml, a real
// driver) and a simulation configured by a file (package gpu/sim, for
// tests, the demo and kwok nodes). The node daemon runs the same code over
// either.
package gpu

import "context"

// Device is one GPU as discovery reports it.
type Device struct {
	// Index is the driver's index (nvidia-smi's), UUID its stable name.
	Index int
	UUID  string
	Model string
	// MemoryMiB is the GPU's total memory.
	MemoryMiB int64
	// UsableMemoryMiB is what processes can allocate: MemoryMiB less what
	// the driver and firmware reserve. 0 if unknown, taken as MemoryMiB.
	UsableMemoryMiB int64
	// NUMANode is the CPU NUMA node the GPU is attached to; -1 if unknown.
	NUMANode int
	// NVLinkPeers are the indexes of GPUs joined to this one by NVLink.
	NVLinkPeers []int
	// Healthy is false once the GPU has had a fatal XID error or has
	// vanished.
	Healthy bool
	// DeviceNode is the GPU's character device on the host
	// (/dev/nvidia<minor>); containers get it at /dev/<its name>. Empty
	// if unknown.
	DeviceNode string
}

// Process is a process using a GPU.
type Process struct {
	PID           int   `json:"pid"`
	UsedMemoryMiB int64 `json:"usedMemoryMiB"`
}

// Usage is what a GPU is doing now.
type Usage struct {
	UUID string
	// UtilizationPercent is the share of time a kernel ran, 0-100.
	UtilizationPercent int
	UsedMemoryMiB      int64
	TemperatureC       int
	PowerWatts         float64
	Processes          []Process
}

// Event reports a GPU's health change, e.g. an XID error.
type Event struct {
	UUID    string
	Healthy bool
	// Reason says why, e.g. "XID 79: GPU has fallen off the bus".
	Reason string
}

// Backend discovers GPUs and reads their usage.
type Backend interface {
	// Devices lists the node's GPUs in index order.
	Devices() ([]Device, error)
	// Usage reads every GPU's usage, in index order.
	Usage() ([]Usage, error)
	// Watch sends health changes until ctx ends.
	Watch(ctx context.Context, events chan<- Event) error
	// Close releases the backend.
	Close() error
}
