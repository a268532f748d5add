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

// DeepCopy returns a copy of in that shares no memory with it.
func (in *WorkloadArgs) DeepCopy() *WorkloadArgs {
	if in == nil {
		return nil
	}
	out := *in
	if in.Learn != nil {
		v := *in.Learn
		out.Learn = &v
	}
	out.Shapes = slices.Clone(in.Shapes)
	for i := range out.Shapes {
		out.Shapes[i].Requests = in.Shapes[i].Requests.DeepCopy()
		out.Shapes[i].Models = slices.Clone(in.Shapes[i].Models)
	}
	return &out
}
