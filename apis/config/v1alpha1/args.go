package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// KindGPUShareArgs is the kind of GPUShareArgs.
const KindGPUShareArgs = "GPUShareArgs"

// GPUShareArgs configures gpushare's scheduler plugin (the args of the
// GPUShare plugin in a KubeSchedulerConfiguration profile) and its HTTP
// extender (the file given to --config):
//
//	apiVersion: config.gpushare.io/v1alpha1
//	kind: GPUShareArgs
//	nodePolicy: fgd-robust
//	resourceModel:
//	  resources:
//	  - {name: aliyun.com/gpu-mem, kind: Memory, unit: MiB}
type GPUShareArgs struct {
	metav1.TypeMeta `json:",inline"`

	// NodePolicy chooses among the nodes a pod fits: fgd-robust (default:
	// the placement that leaves the least GPU share unusable by the mix
	// of pods the scheduler sees, see Workload), fgd-fill, fgd-pack, fgd,
	// binpack, spread, random, bestfit, or load-aware (binpack that avoids GPUs
	// whose live use, published by gpushare-node, exceeds their bookings
	// or whose engine is busy; bookings alone when the sample is older
	// than 3 minutes).
	NodePolicy string `json:"nodePolicy,omitempty"`
	// GPUPolicy chooses the GPUs of the chosen node; default: the GPU
	// policy of the same name as NodePolicy.
	GPUPolicy string `json:"gpuPolicy,omitempty"`
	// Seed drives the random policy and the hash that breaks ties between
	// equally good nodes. Default 0.
	Seed uint64 `json:"seed,omitempty"`
	// Workload tunes how the fragmentation-aware policies (fgd, fgd-pack,
	// fgd-fill, fgd-robust) learn the mix of pod shapes they weigh. Default: learned
	// from the GPU pods the scheduler sees, starting from one whole GPU
	// per pod.
	Workload *WorkloadArgs `json:"workload,omitempty"`
	// DisableTopology turns off the NVLink and NUMA preference for
	// multi-GPU containers.
	DisableTopology bool `json:"disableTopology,omitempty"`
	// ResourceModel maps extended resource names to GPU requests; default
	// the built-in model (see ResourceModel). Its apiVersion and kind may
	// be left out.
	ResourceModel *ResourceModel `json:"resourceModel,omitempty"`
	// ReservedMemory is what the driver and firmware keep of each GPU
	// model where NVML reports no reserved memory (drivers before R510,
	// or a reservation of 0): gpushare-node then publishes the GPU's
	// usable memory as its total less this, and the scheduler books
	// against that. Measure it on an idle GPU (docs/resource-model.md).
	// Default none: the whole memory is usable.
	ReservedMemory []ReservedMemory `json:"reservedMemory,omitempty"`
	// Defrag lets gpushare-scheduler move running pods that opt in to
	// make room for a GPU pod that fits no node only because free GPU
	// memory is scattered. Default off. The HTTP extender does not move
	// pods.
	Defrag *DefragArgs `json:"defrag,omitempty"`
}

// DefragArgs configure defragmentation: when a pod that asks for GPUs fits
// no node and preemption frees none, gpushare-scheduler plans the fewest
// moves of running pods that make room for it (pods labelled
// gpushare.io/movable=true, or in a namespace so labelled, that a
// ReplicaSet, StatefulSet or Job recreates, of no higher priority, within
// their PodDisruptionBudgets), holds the pod's place and each moved pod's
// destination, and evicts the moved pods through the Eviction API.
type DefragArgs struct {
	// Enabled turns defragmentation on. Default false.
	Enabled bool `json:"enabled,omitempty"`
	// MaxMoves is the most pods one plan moves. Default 3, at most 20.
	MaxMoves int `json:"maxMoves,omitempty"`
	// MaxTargets is the most nodes tried as the waiting pod's node, those
	// with the least movable GPU memory first. Default 64.
	MaxTargets int `json:"maxTargets,omitempty"`
	// PlansPerMinute bounds how many plans are started per minute, over
	// all waiting pods, and the searches for one to ten times as many.
	// Default 6.
	PlansPerMinute int `json:"plansPerMinute,omitempty"`
	// Timeout is how long the held places wait for the waiting pod and
	// the moved pods' replacements: what is still held then is released,
	// with an event saying why. Default 2m.
	Timeout metav1.Duration `json:"timeout,omitempty"`
}

// Defaults of DefragArgs.
const (
	DefaultDefragMaxMoves       = 3
	DefaultDefragMaxTargets     = 64
	DefaultDefragPlansPerMinute = 6
	DefaultDefragTimeout        = 2 * time.Minute
)

// DefragOn reports whether defragmentation is enabled.
func (a *GPUShareArgs) DefragOn() bool { return a.Defrag != nil && a.Defrag.Enabled }

// WorkloadArgs tune the learned workload of the fragmentation-aware
// policies.
type WorkloadArgs struct {
	// Learn learns the mix from the GPU pods the scheduler sees: each pod
	// once, when first seen, recent pods weighing more (HalfLife). On a
	// restart the mix is learned again from the cluster's pods, oldest
	// first. Default true; false weighs Shapes as they are.
	Learn *bool `json:"learn,omitempty"`
	// HalfLife is the number of GPU pods after which a pod seen weighs
	// half as much. Default 2000.
	HalfLife int64 `json:"halfLife,omitempty"`
	// Warmup is how many pods the prior (Shapes, or one whole GPU per pod
	// when Shapes is empty) weighs as, so that the first pods seen do not
	// decide alone. Default 100.
	Warmup int64 `json:"warmup,omitempty"`
	// Shapes is the prior: the mix expected before any pod is seen. With
	// Learn false it is the workload.
	Shapes []WorkloadShape `json:"shapes,omitempty"`
	// KeepIdleGPUs keeps idle GPUs for the whole-GPU pods the learned mix
	// expects while the cluster fills: once the idle GPUs are fewer than
	// the whole-GPU share of what the free GPU share is still expected
	// to take, a pod asking part of a GPU goes to a partly used GPU or
	// waits (reason GPUKeptSpare) rather than break an idle one. The pods
	// waiting, and pods leaving as others arrive, ease it. It needs a
	// learned workload (Learn) and a fragmentation-aware NodePolicy.
	// Default false.
	KeepIdleGPUs bool `json:"keepIdleGPUs,omitempty"`
	// KeepIdleFor bounds how long a pod waits, from its creation, while
	// idle GPUs are kept from it (KeepIdleGPUs): the whole-GPU pods
	// expected may not come. Past it the pod's share may take an idle
	// GPU, and the pod is retried then. Default 1m.
	KeepIdleFor metav1.Duration `json:"keepIdleFor,omitempty"`
}

// WorkloadShape is one kind of pod in a workload.
type WorkloadShape struct {
	// Weight is the shape's share of pods, relative to the others; at
	// least 1.
	Weight int64 `json:"weight"`
	// Requests are the pod's requests as its spec writes them: cpu,
	// memory and the GPU resources of the resource model, e.g.
	// {cpu: "4", gpushare.io/gpu-core: "50"}.
	Requests corev1.ResourceList `json:"requests"`
	// Models are the GPU models the pod accepts; empty accepts any.
	Models []string `json:"models,omitempty"`
}

// Learns reports whether the workload is learned (the default).
func (w *WorkloadArgs) Learns() bool { return w == nil || w.Learn == nil || *w.Learn }

// ReservedMemory is the memory a GPU model holds back from processes.
type ReservedMemory struct {
	// Model is a GPU model as NVML names it ("Tesla T4"), or the start of
	// one ("NVIDIA A100"). Where several match a GPU the longest wins.
	Model string `json:"model"`
	// MiB is the memory reserved, at least 1.
	MiB int64 `json:"mib"`
}

// ReservedMiB returns the memory a's ReservedMemory holds back on a GPU
// of model: the entry that is model or the longest start of it, 0 if
// none is.
func (a *GPUShareArgs) ReservedMiB(model string) int64 {
	best, mib := -1, int64(0)
	for _, r := range a.ReservedMemory {
		if strings.HasPrefix(model, r.Model) && len(r.Model) > best {
			best, mib = len(r.Model), r.MiB
		}
	}
	return mib
}

// DefaultNodePolicy is the node policy when none is set: the
// fragmentation-aware policy, on the workload it learns.
const DefaultNodePolicy = "fgd-robust"

// SetArgsDefaults fills the unset fields of a.
func SetArgsDefaults(a *GPUShareArgs) {
	if a.APIVersion == "" && a.Kind == "" {
		a.APIVersion, a.Kind = APIVersion, KindGPUShareArgs
	}
	if a.NodePolicy == "" {
		a.NodePolicy = DefaultNodePolicy
	}
	if a.ResourceModel == nil {
		a.ResourceModel = &ResourceModel{}
	}
	SetDefaults(a.ResourceModel)
	if a.Workload == nil {
		a.Workload = &WorkloadArgs{}
	}
	if a.Workload.Learn == nil {
		learn := true
		a.Workload.Learn = &learn
	}
	if d := a.Defrag; d != nil {
		if d.MaxMoves == 0 {
			d.MaxMoves = DefaultDefragMaxMoves
		}
		if d.MaxTargets == 0 {
			d.MaxTargets = DefaultDefragMaxTargets
		}
		if d.PlansPerMinute == 0 {
			d.PlansPerMinute = DefaultDefragPlansPerMinute
		}
		if d.Timeout.Duration == 0 {
			d.Timeout.Duration = DefaultDefragTimeout
		}
	}
}

// ValidateArgs reports every invalid field of defaulted args. Policy names
// are checked by the allocation core, which owns them.
func ValidateArgs(a *GPUShareArgs) field.ErrorList {
	errs := validateType(a.APIVersion, a.Kind, KindGPUShareArgs)
	for _, e := range Validate(a.ResourceModel) {
		e.Field = "resourceModel." + e.Field
		errs = append(errs, e)
	}
	errs = append(errs, validateWorkload(field.NewPath("workload"), a.Workload)...)
	errs = append(errs, validateDefrag(field.NewPath("defrag"), a.Defrag)...)
	return append(errs, validateReserved(field.NewPath("reservedMemory"), a.ReservedMemory)...)
}

// validateWorkload checks what needs no resource model; the shapes'
// GPU requests are checked where the model is (pkg/decision).
func validateWorkload(p *field.Path, w *WorkloadArgs) field.ErrorList {
	var errs field.ErrorList
	if w == nil {
		return nil
	}
	if w.HalfLife < 0 {
		errs = append(errs, field.Invalid(p.Child("halfLife"), w.HalfLife, "must not be negative (pods; 0 for the default)"))
	}
	if w.Warmup < 0 {
		errs = append(errs, field.Invalid(p.Child("warmup"), w.Warmup, "must not be negative (pods; 0 for the default)"))
	}
	if w.KeepIdleFor.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("keepIdleFor"), w.KeepIdleFor.Duration.String(), "must not be negative (0 for the default, 1m)"))
	}
	if !w.Learns() && len(w.Shapes) == 0 {
		errs = append(errs, field.Required(p.Child("shapes"), "a workload that is not learned must list its shapes"))
	}
	for i, q := range w.Shapes {
		qp := p.Child("shapes").Index(i)
		if q.Weight < 1 {
			errs = append(errs, field.Invalid(qp.Child("weight"), q.Weight, "must be at least 1"))
		}
		if len(q.Requests) == 0 {
			errs = append(errs, field.Required(qp.Child("requests"), "the pod's requests, e.g. {cpu: \"4\", gpushare.io/gpu-core: \"50\"}"))
		}
		for j, m := range q.Models {
			if strings.TrimSpace(m) == "" {
				errs = append(errs, field.Invalid(qp.Child("models").Index(j), m, "must name a GPU model"))
			}
		}
	}
	return errs
}

func validateDefrag(p *field.Path, d *DefragArgs) field.ErrorList {
	if d == nil {
		return nil
	}
	var errs field.ErrorList
	if d.MaxMoves < 1 || d.MaxMoves > 20 {
		errs = append(errs, field.Invalid(p.Child("maxMoves"), d.MaxMoves, "must be 1 to 20 (pods per plan; 0 for the default, 3)"))
	}
	if d.MaxTargets < 1 {
		errs = append(errs, field.Invalid(p.Child("maxTargets"), d.MaxTargets, "must be at least 1 (nodes tried per plan; 0 for the default, 64)"))
	}
	if d.PlansPerMinute < 1 {
		errs = append(errs, field.Invalid(p.Child("plansPerMinute"), d.PlansPerMinute, "must be at least 1 (0 for the default, 6)"))
	}
	if t := d.Timeout.Duration; t < 10*time.Second || t > time.Hour {
		errs = append(errs, field.Invalid(p.Child("timeout"), d.Timeout.Duration.String(), "must be 10s to 1h (0 for the default, 2m)"))
	}
	return errs
}

func validateReserved(p *field.Path, rs []ReservedMemory) field.ErrorList {
	var errs field.ErrorList
	seen := make(map[string]bool, len(rs))
	for i, r := range rs {
		rp := p.Index(i)
		switch {
		case strings.TrimSpace(r.Model) == "":
			errs = append(errs, field.Required(rp.Child("model"), "a GPU model as nvidia-smi names it, or the start of one"))
		case seen[r.Model]:
			errs = append(errs, field.Duplicate(rp.Child("model"), r.Model))
		}
		seen[r.Model] = true
		if r.MiB < 1 {
			errs = append(errs, field.Invalid(rp.Child("mib"), r.MiB, "must be at least 1 (MiB); leave the model out for none"))
		}
	}
	return errs
}

// LoadArgs decodes GPUShareArgs from YAML or JSON strictly, defaults and
// validates them. Empty data gives the defaults.
func LoadArgs(data []byte) (*GPUShareArgs, error) {
	a := &GPUShareArgs{}
	if len(data) > 0 {
		var err error
		if a, err = decodeStrict[GPUShareArgs](data); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", KindGPUShareArgs, err)
		}
	}
	SetArgsDefaults(a)
	if errs := ValidateArgs(a); len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s: %w", KindGPUShareArgs, errs.ToAggregate())
	}
	return a, nil
}

// LoadArgsFile is LoadArgs of the file at path (a component's --config
// flag); an empty path gives the defaults.
func LoadArgsFile(path string) (*GPUShareArgs, error) {
	var data []byte
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("reading --config: %w", err)
		}
	}
	return LoadArgs(data)
}

// LoadArgsFrom reads GPUShareArgs from data: a GPUShareArgs document (as
// LoadArgs), or a KubeSchedulerConfiguration, gpushare-scheduler's
// --config, whose first profile to configure the GPUShare plugin gives
// them.
func LoadArgsFrom(data []byte) (*GPUShareArgs, error) {
	var head struct {
		Kind     string `json:"kind"`
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			PluginConfig  []struct {
				Name string          `json:"name"`
				Args json.RawMessage `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if head.Kind != "KubeSchedulerConfiguration" {
		return LoadArgs(data)
	}
	for _, p := range head.Profiles {
		for _, pc := range p.PluginConfig {
			if pc.Name == "GPUShare" {
				a, err := LoadArgs(pc.Args)
				if err != nil {
					return nil, fmt.Errorf("profile %s, GPUShare's args: %w", p.SchedulerName, err)
				}
				return a, nil
			}
		}
	}
	return nil, errors.New("the KubeSchedulerConfiguration has no pluginConfig for GPUShare: pass gpushare-scheduler's configuration or a GPUShareArgs file")
}
