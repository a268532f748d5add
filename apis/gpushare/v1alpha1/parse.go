package v1alpha1

import (
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ParseInventory decodes and validates a GPUInventory annotation value.
// Unknown fields are ignored, so a newer node daemon's additions do not
// stop an older scheduler.
func ParseInventory(value string) (*GPUInventory, error) {
	inv, err := parse(value, InventoryAnnotation, ValidateInventory)
	if err != nil {
		return nil, err
	}
	if inv.Mode == "" {
		inv.Mode = ModeShared
	}
	return inv, nil
}

// parse decodes an annotation value into a T and validates it; errors
// name the annotation.
func parse[T any](value, annotation string, validate func(*T) field.ErrorList) (*T, error) {
	var v T
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		return nil, fmt.Errorf("%s: %w", annotation, err)
	}
	if errs := validate(&v); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", annotation, errs.ToAggregate())
	}
	return &v, nil
}

// ParseAllocation decodes and validates an Allocation annotation value.
func ParseAllocation(value string) (*Allocation, error) {
	return parse(value, AllocationAnnotation, ValidateAllocation)
}

// ParseUsage decodes and validates a GPUUsage annotation value.
func ParseUsage(value string) (*GPUUsage, error) {
	return parse(value, UsageAnnotation, validateUsage)
}

func validateUsage(u *GPUUsage) field.ErrorList {
	errs := validateType(u.APIVersion, u.Kind, KindGPUUsage)
	for i, g := range u.GPUs {
		p := field.NewPath("gpus").Index(i)
		if g.Index < 0 {
			errs = append(errs, field.Invalid(p.Child("index"), g.Index, "must not be negative"))
		}
		if g.UsedMemoryMiB < 0 {
			errs = append(errs, field.Invalid(p.Child("usedMemoryMiB"), g.UsedMemoryMiB, "must not be negative"))
		}
		if g.UtilizationPercent < 0 || g.UtilizationPercent > 100 {
			errs = append(errs, field.Invalid(p.Child("utilizationPercent"), g.UtilizationPercent, "must be 0 to 100"))
		}
	}
	if u.Time.IsZero() {
		errs = append(errs, field.Required(field.NewPath("time"), "the sample's time"))
	}
	return errs
}

// Marshal encodes v (a *GPUInventory, *Allocation or *GPUUsage) with its
// apiVersion and kind set.
func Marshal(v any) (string, error) {
	switch t := v.(type) {
	case *GPUInventory:
		t.APIVersion, t.Kind = APIVersion, KindGPUInventory
	case *Allocation:
		t.APIVersion, t.Kind = APIVersion, KindAllocation
	case *GPUUsage:
		t.APIVersion, t.Kind = APIVersion, KindGPUUsage
	default:
		return "", fmt.Errorf("gpushare.io/v1alpha1: cannot marshal %T", v)
	}
	b, err := json.Marshal(v)
	return string(b), err
}

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

// ValidateInventory checks an inventory: GPUs indexed 0..n-1 in order,
// unique non-empty UUIDs, positive memory, peers that exist.
func ValidateInventory(inv *GPUInventory) field.ErrorList {
	errs := validateType(inv.APIVersion, inv.Kind, KindGPUInventory)
	switch inv.Mode {
	case "", ModeShared, ModeWholeCard:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("mode"), inv.Mode, []Mode{ModeShared, ModeWholeCard}))
	}
	if e := inv.Enforcement; e != "" && !slices.Contains(Enforcements(), e) {
		errs = append(errs, field.NotSupported(field.NewPath("enforcement"), e, Enforcements()))
	}
	p := field.NewPath("gpus")
	if len(inv.GPUs) == 0 {
		errs = append(errs, field.Required(p, "a node in gpushare has at least one GPU"))
	}
	uuids := make(map[string]bool, len(inv.GPUs))
	for i, g := range inv.GPUs {
		gp := p.Index(i)
		if g.Index != i {
			errs = append(errs, field.Invalid(gp.Child("index"), g.Index, fmt.Sprintf("must be %d: GPUs are listed in index order from 0", i)))
		}
		switch {
		case g.UUID == "":
			errs = append(errs, field.Required(gp.Child("uuid"), ""))
		case uuids[g.UUID]:
			errs = append(errs, field.Duplicate(gp.Child("uuid"), g.UUID))
		}
		uuids[g.UUID] = true
		if g.MemoryMiB <= 0 {
			errs = append(errs, field.Invalid(gp.Child("memoryMiB"), g.MemoryMiB, "must be positive"))
		}
		if g.UsableMemoryMiB < 0 || (g.MemoryMiB > 0 && g.UsableMemoryMiB > g.MemoryMiB) {
			errs = append(errs, field.Invalid(gp.Child("usableMemoryMiB"), g.UsableMemoryMiB, "must be within 0 (all of memoryMiB) and memoryMiB"))
		}
		if g.NUMANode < -1 {
			errs = append(errs, field.Invalid(gp.Child("numaNode"), g.NUMANode, "must be -1 (unknown) or a NUMA node"))
		}
		for j, peer := range g.NVLinkPeers {
			if peer < 0 || peer >= len(inv.GPUs) || peer == i {
				errs = append(errs, field.Invalid(gp.Child("nvlinkPeers").Index(j), peer, "must be the index of another GPU of the node"))
			}
		}
	}
	return errs
}

// ValidateAllocation checks an allocation on its own; whether its GPUs
// exist on the node is checked against the node's inventory by its reader.
func ValidateAllocation(a *Allocation) field.ErrorList {
	errs := validateType(a.APIVersion, a.Kind, KindAllocation)
	if a.Node == "" {
		errs = append(errs, field.Required(field.NewPath("node"), ""))
	}
	p := field.NewPath("containers")
	names := make(map[string]bool, len(a.Containers))
	for i, c := range a.Containers {
		cp := p.Index(i)
		switch {
		case c.Name == "":
			errs = append(errs, field.Required(cp.Child("name"), ""))
		case names[c.Name]:
			errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
		}
		names[c.Name] = true
		switch c.Kind {
		case ContainerApp, ContainerInit, ContainerSidecar:
		default:
			errs = append(errs, field.NotSupported(cp.Child("kind"), c.Kind, []ContainerKind{ContainerApp, ContainerInit, ContainerSidecar}))
		}
		if len(c.GPUs) == 0 {
			errs = append(errs, field.Required(cp.Child("gpus"), "a container in the allocation has at least one GPU"))
		}
		seen := make(map[int]bool, len(c.GPUs))
		for j, g := range c.GPUs {
			gp := cp.Child("gpus").Index(j)
			if g.Index < 0 || seen[g.Index] {
				errs = append(errs, field.Invalid(gp.Child("index"), g.Index, "must be a GPU index, once per container"))
			}
			seen[g.Index] = true
			if g.UUID == "" {
				errs = append(errs, field.Required(gp.Child("uuid"), ""))
			}
			if g.MemoryMiB < 0 {
				errs = append(errs, field.Invalid(gp.Child("memoryMiB"), g.MemoryMiB, "must not be negative"))
			}
			if g.Compute < 0 || g.Compute > 100 {
				errs = append(errs, field.Invalid(gp.Child("compute"), g.Compute, "must be a percent, 0 to 100"))
			}
		}
	}
	return errs
}
