package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		edit func(*ResourceModel)
		want []string
	}{
		"built-in model": {
			edit: func(*ResourceModel) {},
		},
		"empty resource list": {
			edit: func(m *ResourceModel) { m.Resources = []Resource{} },
			want: []string{"resources: Required value: at least one resource; leave the list out for the built-in one"},
		},
		"bad resources": {
			edit: func(m *ResourceModel) {
				m.Resources = []Resource{
					{Name: "gpu-mem", Kind: KindMemory, Unit: MiB},
					{Name: "kubernetes.io/gpu", Kind: KindCount},
					{Name: "a.io/mem", Kind: KindMemory, Unit: "KiB"},
					{Name: "a.io/mem", Kind: "Bandwidth"},
					{Kind: KindCompute, Unit: GiB},
					{Name: "a.io/bad name", Kind: ""},
				}
			},
			want: []string{
				`resources[0].name: Invalid value: "gpu-mem": an extended resource name needs a domain prefix outside kubernetes.io, e.g. example.com/gpu-mem`,
				`resources[1].name: Invalid value: "kubernetes.io/gpu": an extended resource name needs a domain prefix outside kubernetes.io, e.g. example.com/gpu-mem`,
				`resources[2].unit: Unsupported value: "KiB": supported values: "MiB", "GiB"`,
				`resources[3].name: Duplicate value: "a.io/mem"`,
				`resources[3].kind: Unsupported value: "Bandwidth": supported values: "Memory", "Compute", "Count", "MPS", "MemoryPerGPU", "MemoryPercent", "ComputePerGPU"`,
				`resources[4].name: Required value: an extended resource name such as example.com/gpu-mem`,
				`resources[4].unit: Forbidden: only Memory and MemoryPerGPU resources take a unit`,
				`resources[5].name: Invalid value: "a.io/bad name": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
				`resources[5].kind: Required value: one of Memory, Compute, Count, MPS, MemoryPerGPU, MemoryPercent, ComputePerGPU`,
			},
		},
		"MPS compute out of range": {
			edit: func(m *ResourceModel) { *m.MPSDefaultCompute = 101 },
			want: []string{"mpsDefaultCompute: Invalid value: 101: must be a percent of one GPU, 1 to 100"},
		},
		"MPS compute zero": {
			edit: func(m *ResourceModel) { *m.MPSDefaultCompute = 0 },
			want: []string{"mpsDefaultCompute: Invalid value: 0: must be a percent of one GPU, 1 to 100"},
		},
		"bad annotations": {
			edit: func(m *ResourceModel) {
				m.ModelsAnnotation = "gpu models"
				m.MPSComputeAnnotation = "GPUlimits"
			},
			want: []string{
				`modelsAnnotation: Invalid value: "gpu models": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
				`mpsMemoryAnnotation: Invalid value: "GPUlimits": must differ from mpsComputeAnnotation`,
			},
		},
		"wrong type": {
			edit: func(m *ResourceModel) { m.APIVersion, m.Kind = "v1", "ConfigMap" },
			want: []string{
				`apiVersion: Unsupported value: "v1": supported values: "config.gpushare.io/v1alpha1"`,
				`kind: Unsupported value: "ConfigMap": supported values: "ResourceModel"`,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := Default()
			tc.edit(m)
			var got []string
			for _, e := range Validate(m) {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestSetDefaultsKeepsSetFields(t *testing.T) {
	c := int64(25)
	m := &ResourceModel{
		Resources:         []Resource{{Name: "a.io/mem", Kind: KindMemory, Unit: GiB}},
		ModelsAnnotation:  "a.io/models",
		MPSDefaultCompute: &c,
	}
	SetDefaults(m)
	want := Default()
	want.Resources = []Resource{{Name: "a.io/mem", Kind: KindMemory, Unit: GiB}}
	want.ModelsAnnotation = "a.io/models"
	*want.MPSDefaultCompute = 25
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("SetDefaults() (-want,+got):\n%s", diff)
	}
}
