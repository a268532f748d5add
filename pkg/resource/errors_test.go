package resource

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

func TestPodRequestErrors(t *testing.T) {
	const (
		mem  = "gpushare.io/gpu-mem"
		core = "gpushare.io/gpu-core"
		mps  = "keti.com/mpsgpu"
	)
	cases := map[string]struct {
		cfg     *v1alpha1.ResourceModel
		largest int64
		pod     *corev1.Pod
		want    string
	}{
		"GPU init container, no GPU container after it": {
			pod:  makePod("p").initContainer("setup", limits(mem, "1024")).app("main", corev1.ResourceRequirements{}).obj(),
			want: `container "setup": init container: asks for GPUs but no app or sidecar container after it does, and gpushare can hand an init container GPUs only alongside a later GPU container; give an app container a GPU request too, or drop the init container's`,
		},
		"GPU init container after the last GPU sidecar": {
			pod:  makePod("p").sidecar("side", limits(mem, "512")).initContainer("setup", limits(mem, "1024")).obj(),
			want: `container "setup": init container: asks for GPUs but no app or sidecar container after it does, and gpushare can hand an init container GPUs only alongside a later GPU container; give an app container a GPU request too, or drop the init container's`,
		},
		"negative": {
			pod:  makePod("p").app("c", limits(mem, "-1")).obj(),
			want: `container "c": gpushare.io/gpu-mem: -1 is not positive; ask 1 or more, or leave the resource out`,
		},
		"zero": {
			pod:  makePod("p").app("c", limits(core, "0")).obj(),
			want: `container "c": gpushare.io/gpu-core: 0 is not positive; ask 1 or more, or leave the resource out`,
		},
		"not a whole number": {
			pod:  makePod("p").app("c", limits("gpushare.io/gpu-count", "1500m")).obj(),
			want: `container "c": gpushare.io/gpu-count: 1500m is not a whole number; extended resources count whole units`,
		},
		"too large in MiB": {
			// 2^53 + 1 GiB is more MiB than an int64 holds.
			pod:  makePod("p").app("c", limits("aliyun.com/gpu-mem", "9007199254740993")).obj(),
			want: `container "c": aliyun.com/gpu-mem: 9007199254740993 GiB is too large`,
		},
		"too large for int64": {
			pod:  makePod("p").app("c", limits("aliyun.com/gpu-count", "1e30")).obj(),
			want: `container "c": aliyun.com/gpu-count: 1e30 is too large`,
		},
		"core 150 strands half a GPU": {
			pod:  makePod("p").app("cuda", limits("elasticgpu.io/gpu-core", "150")).obj(),
			want: `container "cuda": elasticgpu.io/gpu-core: 150 is above 100 and not a multiple of 100, which would strand part of a GPU; ask 100 (one whole GPU) or 200, or below 100 for a share`,
		},
		"core 250": {
			pod:  makePod("p").app("cuda", limits(core, "250")).obj(),
			want: `container "cuda": gpushare.io/gpu-core: 250 is above 100 and not a multiple of 100, which would strand part of a GPU; ask 200 (2 whole GPUs) or 300, or below 100 for a share`,
		},
		"memory with whole GPUs": {
			pod:  makePod("p").app("c", limits(mem, "1024", core, "200")).obj(),
			want: `container "c": gpushare.io/gpu-core: 200 asks 2 whole GPU(s), which carry no memory share, but gpushare.io/gpu-mem asks memory; drop gpushare.io/gpu-mem, or ask compute below 100 to share a GPU`,
		},
		"count disagrees with compute": {
			pod:  makePod("p").app("c", limits("gpushare.io/gpu-count", "3", core, "200")).obj(),
			want: `container "c": gpushare.io/gpu-core: 200 asks 2 whole GPU(s) but gpushare.io/gpu-count asks 3; make them agree or drop one`,
		},
		"two names for memory": {
			pod:  makePod("p").app("c", limits(mem, "1024", "aliyun.com/gpu-mem", "1")).obj(),
			want: `container "c": gpushare.io/gpu-mem: conflicts with aliyun.com/gpu-mem: both ask GPU memory; keep one`,
		},
		"two names for compute": {
			pod:  makePod("p").app("c", limits(core, "50", "elasticgpu.io/gpu-core", "50")).obj(),
			want: `container "c": gpushare.io/gpu-core: conflicts with elasticgpu.io/gpu-core: both ask GPU compute; keep one`,
		},
		"limits differ from requests": {
			pod: makePod("p").app("c", corev1.ResourceRequirements{
				Limits: list(mem, "2048"), Requests: list(mem, "1024")}).obj(),
			want: `container "c": gpushare.io/gpu-mem: limits (2048) and requests (1024) differ; extended resources cannot be overcommitted: set only limits, or both to the same value`,
		},
		"memory above the largest GPU": {
			largest: 16384,
			pod:     makePod("p").app("c", limits(mem, "20000")).obj(),
			want:    `container "c": gpushare.io/gpu-mem: 20000 MiB per GPU is more than the largest GPU holds (16384 MiB)`,
		},
		"memory over several GPUs above the largest GPU": {
			// 40000 MiB over 2 GPUs is 20000 MiB each.
			largest: 16384,
			pod:     makePod("p").app("c", limits(mem, "40000", "gpushare.io/gpu-count", "2")).obj(),
			want:    `container "c": gpushare.io/gpu-mem: 40000 MiB over 2 GPUs is 20000 MiB per GPU, more than the largest GPU holds (16384 MiB)`,
		},
		"the Aliyun system's MiB pod under the GiB default: 3500 GiB": {
			largest: 24576,
			pod:     fromTemplate(t, "default", "gpu-test-mem-1", aliyunMiB),
			want:    `container "recommend-system-container": aliyun.com/gpu-mem: 3584000 MiB per GPU is more than the largest GPU holds (24576 MiB); this resource model counts aliyun.com/gpu-mem in GiB: if the device plugin counts MiB (--memory-unit=MiB), configure it with unit MiB`,
		},
		"empty model name": {
			pod:  makePod("p").annotate("gpushare.io/gpu-models", "A100||H100").app("c", limits(mem, "1")).obj(),
			want: `pod "default/p": gpushare.io/gpu-models: empty GPU model name in "A100||H100"; separate names with a single | or ,`,
		},
		"trailing separator": {
			pod:  makePod("p").annotate("gpushare.io/gpu-models", "A100,").app("c", limits(mem, "1")).obj(),
			want: `pod "default/p": gpushare.io/gpu-models: empty GPU model name in "A100,"; separate names with a single | or ,`,
		},
		"empty models list": {
			pod:  makePod("p").annotate("gpushare.io/gpu-models", " ").app("c", limits(mem, "1")).obj(),
			want: `pod "default/p": gpushare.io/gpu-models: empty list of GPU models; name at least one, or remove the annotation to allow any model`,
		},
		"MPS with another kind": {
			pod:  makePod("p").app("c", limits(mps, "1", mem, "1024")).obj(),
			want: `container "c": keti.com/mpsgpu: cannot be combined with gpushare.io/gpu-mem: an MPS container asks its GPU count with keti.com/mpsgpu and its memory per GPU with the pod annotation GPUlimits`,
		},
		"MPS compute not a percent": {
			pod:  makePod("p").annotate("gpushare.io/mps-compute", "150").app("c", limits(mps, "1")).obj(),
			want: `container "c": gpushare.io/mps-compute: "150" is not a percent of one GPU; write a whole number from 1 to 100`,
		},
		"MPS memory without a unit": {
			pod:  makePod("p").annotate("GPUlimits", "4096").app("c", limits(mps, "1")).obj(),
			want: `container "c": GPUlimits: "4096" has no unit and would count bytes; write 4Gi or 3500Mi`,
		},
		"MPS memory not a quantity": {
			pod:  makePod("p").annotate("GPUlimits", "4 GB").app("c", limits(mps, "1")).obj(),
			want: `container "c": GPUlimits: "4 GB" is not a quantity; write GPU memory per GPU such as 4Gi or 3500Mi`,
		},
		"MPS memory above the largest GPU": {
			largest: 16384,
			pod:     makePod("p").annotate("GPUlimits", "20Gi").app("c", limits(mps, "2")).obj(),
			want:    `container "c": GPUlimits: 40960 MiB over 2 GPUs is 20480 MiB per GPU, more than the largest GPU holds (16384 MiB)`,
		},
		"a name the model does not manage is not read": {
			cfg: &v1alpha1.ResourceModel{Resources: []v1alpha1.Resource{{Name: "aliyun.com/gpu-mem", Kind: v1alpha1.KindMemory}}},
			pod: makePod("p").app("c", limits("aliyun.com/gpu-mem", "0", mem, "-5")).obj(),
			// gpushare.io/gpu-mem is not managed here, so only the zero counts.
			want: `container "c": aliyun.com/gpu-mem: 0 is not positive; ask 1 or more, or leave the resource out`,
		},
		"the first problem in spec order": {
			pod: makePod("p").initContainer("first", limits(core, "150")).
				app("second", limits(mem, "0")).obj(),
			want: `container "first": gpushare.io/gpu-core: 150 is above 100 and not a multiple of 100, which would strand part of a GPU; ask 100 (one whole GPU) or 200, or below 100 for a share`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := New(tc.cfg)
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			m.SetLargestGPU(tc.largest)
			got, err := m.PodRequest(tc.pod)
			if err == nil {
				t.Fatalf("PodRequest() = %+v, want error %q", got, tc.want)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("PodRequest() error (-want,+got):\n%s", diff)
			}
			if !errors.Is(err, alloc.ErrInvalidRequest) {
				t.Errorf("errors.Is(%v, alloc.ErrInvalidRequest) = false", err)
			}
			var re *RequestError
			if !errors.As(err, &re) {
				t.Errorf("errors.As(%v, *RequestError) = false", err)
			}
		})
	}
}

func TestRequestErrorFields(t *testing.T) {
	m, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.PodRequest(makePod("p").app("cuda", limits("elasticgpu.io/gpu-core", "150")).obj())
	var got *RequestError
	if !errors.As(err, &got) {
		t.Fatalf("PodRequest() error = %v, want a *RequestError", err)
	}
	want := &RequestError{
		Pod: "default/p", Container: "cuda", Resource: "elasticgpu.io/gpu-core",
		Reason: "150 is above 100 and not a multiple of 100, which would strand part of a GPU; ask 100 (one whole GPU) or 200, or below 100 for a share",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RequestError (-want,+got):\n%s", diff)
	}
}
