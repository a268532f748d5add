package v1alpha1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoad(t *testing.T) {
	aliyunMiB := Default()
	aliyunMiB.Resources = []Resource{
		{Name: "aliyun.com/gpu-mem", Kind: KindMemory, Unit: MiB},
		{Name: "aliyun.com/gpu-count", Kind: KindCount},
	}
	mps30 := Default()
	*mps30.MPSDefaultCompute = 30
	mps30.MPSMemoryAnnotation = "example.com/mps-memory"

	cases := map[string]struct {
		data string
		want *ResourceModel
		// wantErr is a substring of the error; empty for none.
		wantErr string
	}{
		"type only gives the built-in model": {
			data: "apiVersion: config.gpushare.io/v1alpha1\nkind: ResourceModel\n",
			want: Default(),
		},
		"the Aliyun system's aliyun.com/gpu-mem switched to MiB": {
			data: `
apiVersion: config.gpushare.io/v1alpha1
kind: ResourceModel
resources:
- name: aliyun.com/gpu-mem
  kind: Memory
  unit: MiB
- {name: aliyun.com/gpu-count, kind: Count}
`,
			want: aliyunMiB,
		},
		"JSON, memory unit defaults to MiB": {
			data: `{"apiVersion": "config.gpushare.io/v1alpha1", "kind": "ResourceModel",
				"resources": [{"name": "aliyun.com/gpu-mem", "kind": "Memory"}, {"name": "aliyun.com/gpu-count", "kind": "Count"}]}`,
			want: aliyunMiB,
		},
		"MPS settings": {
			data: `
apiVersion: config.gpushare.io/v1alpha1
kind: ResourceModel
mpsDefaultCompute: 30
mpsMemoryAnnotation: example.com/mps-memory
`,
			want: mps30,
		},
		"unknown field": {
			data:    "apiVersion: config.gpushare.io/v1alpha1\nkind: ResourceModel\nresource: []\n",
			wantErr: `unknown field "resource"`,
		},
		"unknown field in a resource": {
			data:    "apiVersion: config.gpushare.io/v1alpha1\nkind: ResourceModel\nresources:\n- {name: a.io/m, kind: Memory, units: MiB}\n",
			wantErr: `unknown field "resources[0].units"`,
		},
		"field in the wrong case": {
			data:    "apiVersion: config.gpushare.io/v1alpha1\nkind: ResourceModel\nModelsAnnotation: example.com/models\n",
			wantErr: "field names are case-sensitive",
		},
		"field in the wrong case is named": {
			data:    `{"apiVersion": "config.gpushare.io/v1alpha1", "kind": "ResourceModel", "Resources": []}`,
			wantErr: `unknown field "Resources"`,
		},
		"duplicate field in JSON": {
			data:    `{"apiVersion": "config.gpushare.io/v1alpha1", "kind": "ResourceModel", "kind": "ResourceModel"}`,
			wantErr: `key "kind" already set`,
		},
		"duplicate field": {
			data:    "apiVersion: config.gpushare.io/v1alpha1\nkind: ResourceModel\nkind: ResourceModel\n",
			wantErr: `key "kind" already set`,
		},
		"wrong type": {
			data:    "apiVersion: config.gpushare.io/v1alpha1\nkind: ResourceModel\nmpsDefaultCompute: ten\n",
			wantErr: "decoding ResourceModel",
		},
		"wrong apiVersion": {
			data:    "apiVersion: config.gpushare.io/v1\nkind: ResourceModel\n",
			wantErr: `apiVersion: Unsupported value: "config.gpushare.io/v1"`,
		},
		"wrong kind": {
			data:    "apiVersion: config.gpushare.io/v1alpha1\nkind: KubeSchedulerConfiguration\n",
			wantErr: `kind: Unsupported value: "KubeSchedulerConfiguration"`,
		},
		"no type": {
			data:    "resources: []\n",
			wantErr: `apiVersion: Unsupported value: ""`,
		},
		"empty file": {
			data:    "",
			wantErr: `apiVersion: Unsupported value: ""`,
		},
		"invalid field reports its path": {
			data: `
apiVersion: config.gpushare.io/v1alpha1
kind: ResourceModel
resources:
- {name: a.io/mem, kind: Memory}
- {name: a.io/core, kind: Compute}
- {name: a.io/mem2, kind: Memory, unit: KiB}
`,
			wantErr: `resources[2].unit: Unsupported value: "KiB": supported values: "MiB", "GiB"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Load([]byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Load() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestDeepCopy(t *testing.T) {
	in := Default()
	out := in.DeepCopy()
	out.Resources[0].Name = "changed.io/x"
	*out.MPSDefaultCompute = 50
	if diff := cmp.Diff(Default(), in); diff != "" {
		t.Errorf("DeepCopy shares memory with its input (-want,+got):\n%s", diff)
	}
}
