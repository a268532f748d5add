package v1alpha1

import "slices"

// DeepCopy returns a copy of in that shares no memory with it.
func (in *ResourceModel) DeepCopy() *ResourceModel {
	if in == nil {
		return nil
	}
	out := *in
	out.Resources = slices.Clone(in.Resources)
	out.UnitOverrides = slices.Clone(in.UnitOverrides)
	for i := range out.UnitOverrides {
		out.UnitOverrides[i].Namespaces = slices.Clone(in.UnitOverrides[i].Namespaces)
	}
	if in.MPSDefaultCompute != nil {
		v := *in.MPSDefaultCompute
		out.MPSDefaultCompute = &v
	}
	return &out
}
