package inspect

import (
	"time"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// Cluster is the view of every gpushare node, what is booked on its GPUs
// and by whom, and the records gpushare books nothing for.
type Cluster struct {
	Nodes []Node `json:"nodes"`
	// Refused lists the allocation records the scheduler's cache does
	// not book (unparsable, not bound, not what the pod asks for, or on
	// a node outside gpushare), with why.
	Refused []Refused `json:"refused,omitempty"`
	// Unconforming lists the allocation records the scheduler's cache
	// books though they are not what their pods ask (edited after
	// binding, read otherwise under the resource model now, or written
	// by hand): they hold their GPUs while the pods run.
	Unconforming []Refused `json:"unconforming,omitempty"`
	// OverCommitted lists the allocation records that do not fit their
	// GPUs beside the others (the node's GPUs changed under the pods, or
	// a record was written by hand or by another system): the cache holds
	// those GPUs full until a pod goes.
	OverCommitted []Refused `json:"overCommitted,omitempty"`
	// KeptWaiting lists the pods that wait, unbound, while idle GPUs are
	// kept for the whole-GPU pods the learned mix expects (their
	// PodScheduled condition names alloc.ReasonGPUSpare).
	KeptWaiting []string `json:"keptWaiting,omitempty"`
	// AllocatedMiB and TotalMiB sum the GPU memory of every node.
	AllocatedMiB int64 `json:"allocatedMiB"`
	TotalMiB     int64 `json:"totalMiB"`
}

// Node is one node that opts in to gpushare.
type Node struct {
	Name    string `json:"name"`
	Address string `json:"address,omitempty"`
	Mode    string `json:"mode,omitempty"`
	// Enforcement is what holds the containers that share the node's
	// GPUs to their shares, as its daemon publishes it (none if it
	// publishes none).
	Enforcement string `json:"enforcement,omitempty"`
	// Error says why the node takes no part (no or an invalid inventory).
	Error string `json:"error,omitempty"`
	GPUs  []GPU  `json:"gpus,omitempty"`
	// Usage is the node daemon's last published sample, if any.
	Usage *Usage `json:"usage,omitempty"`
	// AllocatedMiB and TotalMiB sum the node's GPUs.
	AllocatedMiB int64 `json:"allocatedMiB"`
	TotalMiB     int64 `json:"totalMiB"`
}

// Usage describes a node's GPUUsage sample.
type Usage struct {
	Time time.Time `json:"time,omitzero"`
	// Stale is set when the sample is older than the scheduler keeps one.
	Stale bool `json:"stale,omitempty"`
	// Error says why the annotation could not be read.
	Error string `json:"error,omitempty"`
}

// GPU is one GPU of a node with what is booked on it.
type GPU struct {
	Index           int      `json:"index"`
	UUID            string   `json:"uuid"`
	Model           string   `json:"model"`
	MemoryMiB       int64    `json:"memoryMiB"`
	Compute         int64    `json:"compute"`
	Healthy         bool     `json:"healthy"`
	BookedMemoryMiB int64    `json:"bookedMemoryMiB"`
	BookedCompute   int64    `json:"bookedCompute"`
	Holders         []Holder `json:"holders,omitempty"`
	// Live is the GPU's use in the node's usage sample, if it has one.
	Live *Live `json:"live,omitempty"`
	// Notes flag what needs a look: unhealthy, vanished, use beyond
	// bookings, a stale sample.
	Notes []string `json:"notes,omitempty"`
}

// Live is a GPU's sampled use.
type Live struct {
	MemoryMiB   int64 `json:"memoryMiB"`
	Utilization int64 `json:"utilizationPercent"`
}

// Holder is one container's share of a GPU.
type Holder struct {
	Pod       string `json:"pod"`
	Container string `json:"container"`
	Kind      string `json:"kind"`
	MemoryMiB int64  `json:"memoryMiB"`
	Compute   int64  `json:"compute"`
	// Enforced says what holds the container to its share: mps,
	// hami-core, or none (booked only); whole for whole GPUs.
	Enforced string `json:"enforced,omitempty"`
}

// Refused is an allocation record gpushare books nothing for, or (in
// Cluster.Unconforming) one it books though it is not what its pod asks,
// or (in Cluster.OverCommitted) one that over-commits its GPUs.
type Refused struct {
	Pod   string `json:"pod"`
	Node  string `json:"node,omitempty"`
	Error string `json:"error"`
}

// kindName is the record's word for a container kind.
var kindName = map[alloc.ContainerKind]string{alloc.App: "App", alloc.Init: "Init", alloc.Sidecar: "Sidecar"}
