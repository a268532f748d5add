package alloc

import (
	"slices"
	"strings"
)

// Filter narrows the GPUs a container may take beyond its Models, as
// HAMi's pod annotations do: by parts of the model's name and by UUID.
// The zero Filter, and nil, allow every GPU.
type Filter struct {
	// Types and NotTypes match a GPU whose type contains one of them,
	// ignoring case; the type is the model, with "NVIDIA-" in front where
	// it does not start with NVIDIA (HAMi's device type, e.g.
	// "NVIDIA-Tesla T4"). A GPU must match one of Types, if any, and none
	// of NotTypes.
	Types, NotTypes []string
	// UUIDs and NotUUIDs name GPUs exactly: a GPU must be one of UUIDs,
	// if any, and none of NotUUIDs.
	UUIDs, NotUUIDs []string
}

// Allows reports whether f lets a container take g.
func (f *Filter) Allows(g *GPU) bool {
	if f == nil {
		return true
	}
	if len(f.UUIDs) > 0 && !slices.Contains(f.UUIDs, g.UUID) || slices.Contains(f.NotUUIDs, g.UUID) {
		return false
	}
	if len(f.Types) == 0 && len(f.NotTypes) == 0 {
		return true
	}
	t := strings.ToUpper(GPUType(g.Model))
	has := func(s string) bool { return strings.Contains(t, strings.ToUpper(s)) }
	return (len(f.Types) == 0 || slices.ContainsFunc(f.Types, has)) && !slices.ContainsFunc(f.NotTypes, has)
}

// GPUType is HAMi's type of a GPU of model: the model, with "NVIDIA-" in
// front where it does not start with NVIDIA.
func GPUType(model string) string {
	if strings.HasPrefix(model, "NVIDIA") {
		return model
	}
	return "NVIDIA-" + model
}

// String says what f asks, for messages: "use-gputype A100,V100".
func (f *Filter) String() string {
	if f == nil {
		return ""
	}
	var parts []string
	for _, p := range []struct {
		name string
		v    []string
	}{{"use-gputype", f.Types}, {"nouse-gputype", f.NotTypes}, {"use-gpuuuid", f.UUIDs}, {"nouse-gpuuuid", f.NotUUIDs}} {
		if len(p.v) > 0 {
			parts = append(parts, p.name+" "+strings.Join(p.v, ","))
		}
	}
	return strings.Join(parts, "; ")
}

// equalFilters reports whether a and b allow the same GPUs by the same
// terms.
func equalFilters(a, b *Filter) bool {
	return a.String() == b.String()
}
