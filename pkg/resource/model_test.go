package resource

import (
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
)

func TestNew(t *testing.T) {
	cases := map[string]struct {
		cfg       *v1alpha1.ResourceModel
		wantNames []corev1.ResourceName
		// wantErr lists substrings of the error; empty for none.
		wantErr []string
	}{
		"nil is the built-in model": {
			wantNames: []corev1.ResourceName{
				"aliyun.com/gpu-count", "aliyun.com/gpu-mem",
				"elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory",
				"gpushare.io/gpu-core", "gpushare.io/gpu-count", "gpushare.io/gpu-mem",
				"keti.com/mpsgpu",
			},
		},
		"a configured list replaces the built-in one": {
			cfg: &v1alpha1.ResourceModel{Resources: []v1alpha1.Resource{
				{Name: "aliyun.com/gpu-mem", Kind: v1alpha1.KindMemory, Unit: v1alpha1.MiB},
			}},
			wantNames: []corev1.ResourceName{"aliyun.com/gpu-mem"},
		},
		"bad config names its fields": {
			cfg: &v1alpha1.ResourceModel{
				Resources: []v1alpha1.Resource{
					{Name: "a.io/mem", Kind: v1alpha1.KindMemory},
					{Name: "a.io/core", Kind: v1alpha1.KindCompute},
					{Name: "a.io/mem2", Kind: v1alpha1.KindMemory, Unit: "KiB"},
				},
				MPSDefaultCompute: ptr(int64(0)),
			},
			wantErr: []string{
				"invalid resource model",
				`resources[2].unit: Unsupported value: "KiB": supported values: "MiB", "GiB"`,
				"mpsDefaultCompute: Invalid value: 0: must be a percent of one GPU, 1 to 100",
			},
		},
		"wrong apiVersion": {
			cfg:     &v1alpha1.ResourceModel{TypeMeta: metav1.TypeMeta{APIVersion: "config.gpushare.io/v2", Kind: v1alpha1.Kind}},
			wantErr: []string{`apiVersion: Unsupported value: "config.gpushare.io/v2"`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.cfg.DeepCopy()
			m, err := New(tc.cfg)
			if diff := cmp.Diff(before, tc.cfg); diff != "" {
				t.Errorf("New() changed its argument (-before,+after):\n%s", diff)
			}
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("New() error = nil, want %q", tc.wantErr)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("New() error = %q, want it to contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			if diff := cmp.Diff(tc.wantNames, m.Names()); diff != "" {
				t.Errorf("Names() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestLargestGPU(t *testing.T) {
	m, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ set, want int64 }{{0, 0}, {24576, 24576}, {-1, 0}} {
		m.SetLargestGPU(tc.set)
		if got := m.LargestGPU(); got != tc.want {
			t.Errorf("SetLargestGPU(%d): LargestGPU() = %d, want %d", tc.set, got, tc.want)
		}
	}
}

// TestConcurrentUse runs under -race: one Model serves many goroutines
// while the largest GPU changes.
func TestConcurrentUse(t *testing.T) {
	m, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := makePod("p").annotate("GPUlimits", "1Gi").
		app("a", limits("gpushare.io/gpu-mem", "1024")).
		app("b", limits("keti.com/mpsgpu", "1")).obj()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				m.SetLargestGPU(int64(16384 + i + j))
				if _, err := m.PodRequest(pod); err != nil {
					t.Errorf("PodRequest() error = %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func ptr[T any](v T) *T { return &v }

func TestUnitMiB(t *testing.T) {
	m, err := New(&v1alpha1.ResourceModel{
		Resources: []v1alpha1.Resource{
			{Name: "aliyun.com/gpu-mem", Kind: v1alpha1.KindMemory, Unit: v1alpha1.GiB},
			{Name: "gpushare.io/gpu-mem", Kind: v1alpha1.KindMemory},
			{Name: "gpushare.io/gpu-core", Kind: v1alpha1.KindCompute},
		},
		UnitOverrides: []v1alpha1.UnitOverride{{Name: "aliyun.com/gpu-mem", Unit: v1alpha1.MiB, Namespaces: []string{"seed-003"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      corev1.ResourceName
		namespace string
		want      int64
	}{
		{"aliyun.com/gpu-mem", "default", 1024},    // GiB
		{"aliyun.com/gpu-mem", "seed-003", 1},      // MiB there
		{"gpushare.io/gpu-mem", "seed-003", 1},     // no override of its own
		{"gpushare.io/gpu-core", "default", 0},     // not memory
		{"elasticgpu.io/gpu-memory", "default", 0}, // not in this model
	} {
		if got := m.UnitMiB(tc.name, tc.namespace); got != tc.want {
			t.Errorf("UnitMiB(%s, %s) = %d, want %d", tc.name, tc.namespace, got, tc.want)
		}
	}
}
