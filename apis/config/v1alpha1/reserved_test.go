package v1alpha1

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadArgsReservedMemory(t *testing.T) {
	cases := map[string]struct {
		data    string
		want    []ReservedMemory
		wantErr []string
	}{
		"default none": {data: "apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\n"},
		"two models": {
			data: `
apiVersion: config.gpushare.io/v1alpha1
kind: GPUShareArgs
reservedMemory:
- {model: Tesla T4, mib: 449}
- {model: NVIDIA A100, mib: 512}
`,
			want: []ReservedMemory{{Model: "Tesla T4", MiB: 449}, {Model: "NVIDIA A100", MiB: 512}},
		},
		"invalid entries": {
			data: `
apiVersion: config.gpushare.io/v1alpha1
kind: GPUShareArgs
reservedMemory:
- {model: Tesla T4, mib: 449}
- {model: Tesla T4, mib: 0}
- {model: " ", mib: 10}
`,
			wantErr: []string{
				`reservedMemory[1].model: Duplicate value: "Tesla T4"`,
				`reservedMemory[1].mib: Invalid value: 0: must be at least 1 (MiB); leave the model out for none`,
				`reservedMemory[2].model: Required value: a GPU model as nvidia-smi names it, or the start of one`,
			},
		},
		"unknown field": {
			data:    "apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nreservedMemory:\n- {model: Tesla T4, bytes: 449}\n",
			wantErr: []string{`unknown field "reservedMemory[0].bytes"`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a, err := LoadArgs([]byte(tc.data))
			if len(tc.wantErr) > 0 {
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("LoadArgs error %v, want it to say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, a.ReservedMemory); diff != "" {
				t.Errorf("reservedMemory (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReservedMiB(t *testing.T) {
	a := &GPUShareArgs{ReservedMemory: []ReservedMemory{
		{Model: "NVIDIA A100", MiB: 500},
		{Model: "NVIDIA A100-SXM4-80GB", MiB: 700},
		{Model: "Tesla T4", MiB: 449},
	}}
	for model, want := range map[string]int64{
		"Tesla T4":              449,
		"NVIDIA A100-PCIE-40GB": 500, // the prefix
		"NVIDIA A100-SXM4-80GB": 700, // the longest match wins, in any order
		"Tesla T":               0,   // an entry longer than the model is no prefix of it
		"NVIDIA H100":           0,
	} {
		if got := a.ReservedMiB(model); got != want {
			t.Errorf("ReservedMiB(%q) = %d, want %d", model, got, want)
		}
	}
}

// LoadArgsFrom reads the GPUShare args out of gpushare-scheduler's own
// configuration (deploy/scheduler-config.yaml), a GPUShareArgs document as
// LoadArgs does, and says so when a scheduler configuration has none.
func TestLoadArgsFrom(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, err := LoadArgsFrom(raw)
	if err != nil {
		t.Fatal(err)
	}
	if o := a.ResourceModel.UnitOverrides; len(o) != 1 || o[0].Unit != MiB || o[0].Namespaces[0] != "team-mib" {
		t.Errorf("unit overrides %+v, want aliyun.com/gpu-mem in MiB in team-mib", o)
	}
	if a, err := LoadArgsFrom([]byte("apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nnodePolicy: spread\n")); err != nil || a.NodePolicy != "spread" {
		t.Errorf("GPUShareArgs: %+v, %v", a, err)
	}
	_, err = LoadArgsFrom([]byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: x\n"))
	if err == nil || !strings.Contains(err.Error(), "no pluginConfig for GPUShare") {
		t.Errorf("a configuration without GPUShare: %v", err)
	}
}
