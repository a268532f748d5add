package v1alpha1

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// KindGPUShareArgs is the kind of GPUShareArgs.
const KindGPUShareArgs = "GPUShareArgs"

// GPUShareArgs configures gpushare's scheduler plugin (the args of the
// GPUShare plugin in a KubeSchedulerConfiguration profile) and its HTTP
// extender (the file given to --config):
//
//	apiVersion: config.gpushare.io/v1alpha1
//	kind: GPUShareArgs
//	nodePolicy: binpack
//	resourceModel:
//	  resources:
//	  - {name: aliyun.com/gpu-mem, kind: Memory, unit: MiB}
type GPUShareArgs struct {
	metav1.TypeMeta `json:",inline"`

	// NodePolicy chooses among the nodes a pod fits: binpack (default),
	// spread, random, bestfit, or load-aware (binpack that avoids GPUs
	// whose live use, published by gpushare-node, exceeds their bookings
	// or whose engine is busy; bookings alone when the sample is older
	// than 3 minutes). fgd, fgd-pack and fgd-fill need a workload and are
	// for the simulator.
	NodePolicy string `json:"nodePolicy,omitempty"`
	// GPUPolicy chooses the GPUs of the chosen node; default: the GPU
	// policy of the same name as NodePolicy.
	GPUPolicy string `json:"gpuPolicy,omitempty"`
	// Seed drives the random policy and the hash that breaks ties between
	// equally good nodes. Default 0.
	Seed uint64 `json:"seed,omitempty"`
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
}

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

// DefaultNodePolicy is the node policy when none is set.
const DefaultNodePolicy = "binpack"

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
}

// ValidateArgs reports every invalid field of defaulted args. Policy names
// are checked by the allocation core, which owns them.
func ValidateArgs(a *GPUShareArgs) field.ErrorList {
	errs := validateType(a.APIVersion, a.Kind, KindGPUShareArgs)
	for _, e := range Validate(a.ResourceModel) {
		e.Field = "resourceModel." + e.Field
		errs = append(errs, e)
	}
	return append(errs, validateReserved(field.NewPath("reservedMemory"), a.ReservedMemory)...)
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
