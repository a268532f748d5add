package v1alpha1

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Validate reports every invalid field of a defaulted model, with paths
// such as resources[2].unit.
func Validate(m *ResourceModel) field.ErrorList {
	errs := validateTypeMeta(m)
	errs = append(errs, validateResources(field.NewPath("resources"), m.Resources)...)
	errs = append(errs, validateAnnotations(m)...)
	errs = append(errs, validateOverrides(field.NewPath("unitOverrides"), m)...)
	p := field.NewPath("mpsDefaultCompute")
	switch c := m.MPSDefaultCompute; {
	case c == nil:
		errs = append(errs, field.Required(p, "a percent of one GPU, 1 to 100"))
	case *c < 1 || *c > 100:
		errs = append(errs, field.Invalid(p, *c, "must be a percent of one GPU, 1 to 100"))
	}
	return errs
}

func validateTypeMeta(m *ResourceModel) field.ErrorList {
	return validateType(m.APIVersion, m.Kind, Kind)
}

// validateType checks a document's apiVersion and kind.
func validateType(apiVersion, kind, want string) field.ErrorList {
	var errs field.ErrorList
	if apiVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), apiVersion, []string{APIVersion}))
	}
	if kind != want {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), kind, []string{want}))
	}
	return errs
}

func validateResources(p *field.Path, rs []Resource) field.ErrorList {
	var errs field.ErrorList
	if len(rs) == 0 {
		return append(errs, field.Required(p, "at least one resource; leave the list out for the built-in one"))
	}
	kinds := []ResourceKind{KindMemory, KindCompute, KindCount, KindMPS, KindMemoryPerGPU, KindMemoryPercent, KindComputePerGPU}
	seen := make(map[string]bool, len(rs))
	for i, r := range rs {
		rp := p.Index(i)
		name := string(r.Name)
		switch {
		case name == "":
			errs = append(errs, field.Required(rp.Child("name"), "an extended resource name such as example.com/gpu-mem"))
		case seen[name]:
			errs = append(errs, field.Duplicate(rp.Child("name"), name))
		default:
			errs = append(errs, validateResourceName(rp.Child("name"), name)...)
		}
		seen[name] = true
		switch {
		case r.Kind == "":
			errs = append(errs, field.Required(rp.Child("kind"), "one of Memory, Compute, Count, MPS, MemoryPerGPU, MemoryPercent, ComputePerGPU"))
		case !slices.Contains(kinds, r.Kind):
			errs = append(errs, field.NotSupported(rp.Child("kind"), r.Kind, kinds))
		}
		switch {
		case r.Kind.Memory() && r.Unit != MiB && r.Unit != GiB:
			errs = append(errs, field.NotSupported(rp.Child("unit"), r.Unit, []MemoryUnit{MiB, GiB}))
		case !r.Kind.Memory() && r.Unit != "":
			errs = append(errs, field.Forbidden(rp.Child("unit"), "only Memory and MemoryPerGPU resources take a unit"))
		}
	}
	return errs
}

// validateResourceName accepts what Kubernetes accepts as an extended
// resource name: a qualified name with a domain prefix outside
// kubernetes.io.
func validateResourceName(p *field.Path, name string) field.ErrorList {
	if msgs := content.IsLabelKey(name); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, name, strings.Join(msgs, "; "))}
	}
	domain, _, ok := strings.Cut(name, "/")
	if !ok || domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") {
		return field.ErrorList{field.Invalid(p, name, "an extended resource name needs a domain prefix outside kubernetes.io, e.g. example.com/gpu-mem")}
	}
	return nil
}

func validateAnnotations(m *ResourceModel) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]string{}
	for _, a := range []struct{ path, key string }{
		{"modelsAnnotation", m.ModelsAnnotation},
		{"mpsComputeAnnotation", m.MPSComputeAnnotation},
		{"mpsMemoryAnnotation", m.MPSMemoryAnnotation},
	} {
		p := field.NewPath(a.path)
		if a.key == "" {
			errs = append(errs, field.Required(p, "an annotation key"))
			continue
		}
		if msgs := content.IsLabelKey(a.key); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p, a.key, strings.Join(msgs, "; ")))
			continue
		}
		if other, dup := seen[a.key]; dup {
			errs = append(errs, field.Invalid(p, a.key, "must differ from "+other))
		}
		seen[a.key] = a.path
	}
	return errs
}

func validateOverrides(p *field.Path, m *ResourceModel) field.ErrorList {
	var errs field.ErrorList
	memory := make(map[corev1.ResourceName]bool, len(m.Resources))
	for _, r := range m.Resources {
		memory[r.Name] = r.Kind.Memory()
	}
	seen := map[string]bool{}
	for i, o := range m.UnitOverrides {
		op := p.Index(i)
		if !memory[o.Name] {
			errs = append(errs, field.Invalid(op.Child("name"), o.Name, "must be a Memory resource of resources"))
		}
		if o.Unit != MiB && o.Unit != GiB {
			errs = append(errs, field.NotSupported(op.Child("unit"), o.Unit, []MemoryUnit{MiB, GiB}))
		}
		if len(o.Namespaces) == 0 {
			errs = append(errs, field.Required(op.Child("namespaces"), "the namespaces whose pods use this unit"))
		}
		for j, ns := range o.Namespaces {
			if msgs := content.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, field.Invalid(op.Child("namespaces").Index(j), ns, strings.Join(msgs, "; ")))
			}
			key := string(o.Name) + "/" + ns
			if seen[key] {
				errs = append(errs, field.Duplicate(op.Child("namespaces").Index(j), ns))
			}
			seen[key] = true
		}
	}
	return errs
}
