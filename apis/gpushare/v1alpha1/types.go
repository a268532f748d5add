package v1alpha1

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Group and version of the stored types.
const (
	GroupName  = "gpushare.io"
	Version    = "v1alpha1"
	APIVersion = GroupName + "/" + Version
)

// Names on cluster objects.
const (
	// InventoryAnnotation on a Node holds its GPUInventory.
	InventoryAnnotation = "gpushare.io/gpu-inventory"
	// AllocationAnnotation on a Pod holds its Allocation.
	AllocationAnnotation = "gpushare.io/allocation"
	// UsageAnnotation holds a node's GPUUsage, the node daemon's summary
	// of live use for load-aware scheduling. The daemon writes it on its
	// Lease (LeaseNamespace/LeasePrefix+node), with each renewal and when
	// use moved enough to matter, so that live use does not write the
	// Node; daemons before that, and a daemon without a lease, write it on
	// the Node, which readers still take when its sample is the newer.
	UsageAnnotation = "gpushare.io/gpu-usage"
	// NodeLabel, set to "true", opts a node in to gpushare.
	NodeLabel = "gpushare"
	// HookResource is the node daemon's device plugin resource through
	// which it hands containers their GPUs: deploy/gpu-hook-policy.yaml
	// gives the n-th GPU container of a pod n of its devices. It works
	// where a container's own GPU resources are not device plugin
	// resources (MiB of GPUs too big to count in devices), and tells init
	// containers from app containers by their number.
	HookResource = "gpushare.io/gpu-hook"
	// LeaseNamespace holds each node daemon's Lease, LeasePrefix+node,
	// which it renews while it runs: the scheduler sends no GPU pod to a
	// node whose daemon has let its lease expire.
	LeaseNamespace = "kube-system"
	LeasePrefix    = "gpushare-node-"
)

// Kinds of the stored types.
const (
	KindGPUInventory = "GPUInventory"
	KindAllocation   = "Allocation"
	KindGPUUsage     = "GPUUsage"
)

// Mode is how a node hands out its GPUs.
type Mode string

// Node modes.
const (
	// ModeShared lets several containers share a GPU.
	ModeShared Mode = "Shared"
	// ModeWholeCard hands out whole GPUs only (the Aliyun system's exclusive nodes).
	ModeWholeCard Mode = "WholeCard"
)

// GPUInventory is a node's GPUs.
type GPUInventory struct {
	metav1.TypeMeta `json:",inline"`
	// Mode is Shared (default) or WholeCard.
	Mode Mode `json:"mode,omitempty"`
	// Enforcement is what holds a shared container to its share on this
	// node's GPUs (gpushare-node --enforcement). Absent means none, as in
	// inventories written before the field existed.
	Enforcement Enforcement `json:"enforcement,omitempty"`
	// GPUs lists every GPU of the node, indexes 0..n-1 in order.
	GPUs []GPU `json:"gpus"`
}

// Enforcement is what holds the containers that share a node's GPUs to
// their shares. Containers that ask for MPS (keti.com/mpsgpu) are MPS
// clients whatever it is, and whole GPUs need none.
type Enforcement string

// Enforcements.
const (
	// EnforcementNone books shares and trusts containers to keep to them.
	EnforcementNone Enforcement = "none"
	// EnforcementMPS runs every shared container as an MPS client, its
	// memory and threads limited by MPS (the node runs MPS: --mps).
	EnforcementMPS Enforcement = "mps"
	// EnforcementHAMiCore preloads HAMi-core's library into every shared
	// container, which limits its memory and compute.
	EnforcementHAMiCore Enforcement = "hami-core"
)

// Holds returns what holds a container to its share on a node whose
// enforcement is e: MPS for a container that asks for MPS (an MPS client
// wherever it runs), e for one that shares its GPUs, and none for one of
// whole GPUs, which nothing else runs on.
func (e Enforcement) Holds(asksMPS, shared bool) Enforcement {
	switch {
	case asksMPS:
		return EnforcementMPS
	case !shared || e == "":
		return EnforcementNone
	}
	return e
}

// Enforcements lists the valid Enforcement values.
func Enforcements() []Enforcement {
	return []Enforcement{EnforcementNone, EnforcementMPS, EnforcementHAMiCore}
}

// GPU is one GPU of a node.
type GPU struct {
	// Index is the GPU's index on the node (nvidia-smi's).
	Index int `json:"index"`
	// UUID is the GPU's UUID, e.g. GPU-5f2c...; unique on the node.
	UUID string `json:"uuid"`
	// Model is the product name, e.g. "NVIDIA H100 80GB HBM3".
	Model string `json:"model"`
	// MemoryMiB is the GPU's memory.
	MemoryMiB int64 `json:"memoryMiB"`
	// UsableMemoryMiB is the memory processes can allocate, MemoryMiB
	// less what the driver reserves (NVML's reserved memory), where the
	// driver reports it; gpushare books against it. Absent means all of
	// MemoryMiB, as in inventories written before the field existed.
	UsableMemoryMiB int64 `json:"usableMemoryMiB,omitempty"`
	// Healthy is false after an XID error or when the GPU vanished.
	Healthy bool `json:"healthy"`
	// NUMANode is the GPU's NUMA node; -1 if unknown.
	NUMANode int `json:"numaNode"`
	// NVLinkPeers are the indexes of the GPUs this one has NVLink to.
	NVLinkPeers []int `json:"nvlinkPeers,omitempty"`
	// MPS is true when the GPU runs an NVIDIA MPS server (gpushare-node
	// --mps): only MPS GPUs take containers that ask for GPUs under MPS
	// (keti.com/mpsgpu). Absent means false, as in inventories written
	// before the field existed.
	MPS bool `json:"mps,omitempty"`
}

// Usable returns the memory gpushare books against: UsableMemoryMiB if
// set, else MemoryMiB.
func (g *GPU) Usable() int64 {
	if g.UsableMemoryMiB > 0 {
		return g.UsableMemoryMiB
	}
	return g.MemoryMiB
}

// Allocation is what a pod holds: the GPUs of one node, per container.
type Allocation struct {
	metav1.TypeMeta `json:",inline"`
	// Node is the node the GPUs belong to.
	Node string `json:"node"`
	// Containers lists each GPU container of the pod, in the order
	// Kubernetes starts them: init containers, then app containers.
	Containers []ContainerAllocation `json:"containers"`
	// Asked is what the pod said of its request, beyond its spec, when the
	// record was written: the request-shaping annotations of the resource
	// model (GPU models, MPS compute and memory). A pod's resources cannot
	// change once it exists, but its annotations can: readers check the
	// record against the pod's spec with these annotations, so that an
	// edit after binding neither frees the GPUs the record holds nor
	// makes the record another pod's. Absent in records written before
	// the field existed: readers then check against the pod as it is.
	Asked *Asked `json:"asked,omitempty"`
}

// Asked is the request-shaping state of a pod at binding.
type Asked struct {
	// Annotations holds each request-shaping annotation the pod carried,
	// by name; a name the pod did not carry is absent.
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ContainerKind says when a container runs.
type ContainerKind string

// Container kinds.
const (
	ContainerApp     ContainerKind = "App"
	ContainerInit    ContainerKind = "Init"
	ContainerSidecar ContainerKind = "Sidecar"
)

// ContainerAllocation is what one container gets.
type ContainerAllocation struct {
	// Name is the container's name.
	Name string `json:"name"`
	// Kind is App, Init or Sidecar (a restartable init container).
	Kind ContainerKind `json:"kind"`
	// GPUs is the container's share of each of its GPUs.
	GPUs []GPUShare `json:"gpus"`
}

// GPUShare is a container's share of one GPU.
type GPUShare struct {
	// Index and UUID name the GPU; both must match the node's inventory.
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// MemoryMiB is the GPU memory the container may use.
	MemoryMiB int64 `json:"memoryMiB"`
	// Compute is the percent of the GPU's compute the container may use.
	Compute int64 `json:"compute"`
}

// GPUUsage is a sample of what a node's GPUs are really doing, published
// by the node daemon at a bounded rate. The scheduler uses it while it is
// fresh and falls back to bookings alone when it is stale or missing.
type GPUUsage struct {
	metav1.TypeMeta `json:",inline"`
	// Time is when the sample was taken.
	Time metav1.Time `json:"time"`
	// GPUs lists each GPU's use, by index.
	GPUs []GPULoad `json:"gpus"`
}

// GPULoad is one GPU's live use.
type GPULoad struct {
	Index int `json:"index"`
	// UsedMemoryMiB is the memory in use by every process, in or out of
	// Kubernetes.
	UsedMemoryMiB int64 `json:"usedMemoryMiB"`
	// UtilizationPercent is the share of time a kernel ran, 0-100.
	UtilizationPercent int64 `json:"utilizationPercent"`
}

// AskedOf returns the Asked of a pod whose annotations are annotations,
// under a resource model whose request-shaping annotations are keys.
func AskedOf(annotations map[string]string, keys []string) *Asked {
	a := &Asked{}
	for _, k := range keys {
		if v, ok := annotations[k]; ok {
			if a.Annotations == nil {
				a.Annotations = make(map[string]string, len(keys))
			}
			a.Annotations[k] = v
		}
	}
	return a
}

// Edited returns, in the order of keys, the request-shaping annotations
// whose value in annotations (present or not) is not the one a records.
func (a *Asked) Edited(annotations map[string]string, keys []string) []string {
	var out []string
	for _, k := range keys {
		was, had := a.Annotations[k]
		is, has := annotations[k]
		if had != has || was != is {
			out = append(out, k)
		}
	}
	return out
}

// Apply returns annotations with each of keys as a records it: the
// annotations the pod had when the record was written, as far as its
// request goes. annotations is not changed.
func (a *Asked) Apply(annotations map[string]string, keys []string) map[string]string {
	out := maps.Clone(annotations)
	if out == nil {
		out = make(map[string]string, len(a.Annotations))
	}
	for _, k := range keys {
		delete(out, k)
		if v, ok := a.Annotations[k]; ok {
			out[k] = v
		}
	}
	return out
}
