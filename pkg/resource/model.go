package resource

import (
	"fmt"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
)

// Model translates pods into allocation requests under one ResourceModel
// configuration. It is safe for concurrent use; the only thing that changes
// after New is the largest GPU, set atomically.
type Model struct {
	resources map[corev1.ResourceName]managed
	names     []corev1.ResourceName

	modelsAnnotation     string
	mpsComputeAnnotation string
	mpsMemoryAnnotation  string
	mpsDefaultCompute    int64

	// overrides maps a Memory resource and a namespace to its unit there.
	overrides map[corev1.ResourceName]map[string]managed

	largestGPU atomic.Int64
}

// managed is what one resource name means.
type managed struct {
	kind v1alpha1.ResourceKind
	// mib is the MiB in one unit of a Memory resource.
	mib int64
	// unit is the configured unit of a Memory resource, for messages.
	unit v1alpha1.MemoryUnit
}

// New builds a Model from cfg, which it defaults (on a copy) and validates;
// nil means v1alpha1.Default().
func New(cfg *v1alpha1.ResourceModel) (*Model, error) {
	c := v1alpha1.Default()
	if cfg != nil {
		c = cfg.DeepCopy()
		v1alpha1.SetDefaults(c)
	}
	if errs := v1alpha1.Validate(c); len(errs) > 0 {
		return nil, fmt.Errorf("invalid resource model: %w", errs.ToAggregate())
	}
	m := &Model{
		resources:            make(map[corev1.ResourceName]managed, len(c.Resources)),
		modelsAnnotation:     c.ModelsAnnotation,
		mpsComputeAnnotation: c.MPSComputeAnnotation,
		mpsMemoryAnnotation:  c.MPSMemoryAnnotation,
		mpsDefaultCompute:    *c.MPSDefaultCompute,
	}
	for _, r := range c.Resources {
		mr := managed{kind: r.Kind, unit: r.Unit, mib: 1}
		if r.Unit == v1alpha1.GiB {
			mr.mib = 1024
		}
		m.resources[r.Name] = mr
		m.names = append(m.names, r.Name)
	}
	for _, o := range c.UnitOverrides {
		mr := m.resources[o.Name]
		mr.unit, mr.mib = o.Unit, 1
		if o.Unit == v1alpha1.GiB {
			mr.mib = 1024
		}
		if m.overrides == nil {
			m.overrides = map[corev1.ResourceName]map[string]managed{}
		}
		if m.overrides[o.Name] == nil {
			m.overrides[o.Name] = map[string]managed{}
		}
		for _, ns := range o.Namespaces {
			m.overrides[o.Name][ns] = mr
		}
	}
	slices.Sort(m.names)
	return m, nil
}

// ModelsAnnotation returns the pod annotation that lists the GPU models a
// pod accepts.
func (m *Model) ModelsAnnotation() string { return m.modelsAnnotation }

// RequestAnnotations returns the pod annotations that shape a pod's
// request (GPU models, MPS compute, MPS memory, HAMi's choice of GPU
// types and UUIDs): unlike its resources, a
// pod's annotations can change after it is bound, so the scheduler keeps
// their values in the pod's record (gpusharev1.Asked) and the admission
// policy makes them immutable once the pod is bound.
func (m *Model) RequestAnnotations() []string {
	return append([]string{m.modelsAnnotation, m.mpsComputeAnnotation, m.mpsMemoryAnnotation}, filterAnnotations...)
}

// Names returns the managed extended resource names, sorted: the names the
// default scheduler should leave to gpushare (ignoredByScheduler).
func (m *Model) Names() []corev1.ResourceName { return slices.Clone(m.names) }

// SetLargestGPU sets the memory of the largest GPU in the cluster, in MiB;
// PodRequest then rejects memory no GPU could hold. 0 means unknown and
// skips the check.
func (m *Model) SetLargestGPU(mib int64) { m.largestGPU.Store(max(mib, 0)) }

// LargestGPU returns what SetLargestGPU set, 0 if unknown.
func (m *Model) LargestGPU() int64 { return m.largestGPU.Load() }

// UnitMiB returns the MiB in one unit of Memory resource name for pods in
// namespace (its unit override there, else its configured unit); 0 if
// name is not a managed Memory resource.
func (m *Model) UnitMiB(name corev1.ResourceName, namespace string) int64 {
	r, ok := m.resources[name]
	if o, over := m.overrides[name][namespace]; over {
		r = o
	}
	if !ok || !r.kind.Memory() {
		return 0
	}
	return r.mib
}
