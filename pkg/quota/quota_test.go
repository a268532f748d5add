package quota

import (
	"errors"
	"testing"

	"github.com/gpushare/gpushare/pkg/alloc"
)

var cluster = []alloc.GPU{
	{Model: "Tesla T4", MemoryMiB: 15360, Healthy: true},
	{Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Healthy: true},
	{Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, MPS: true, Healthy: false},
	{Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, UUID: "GPU-h100", Healthy: true},
}

func app(r alloc.ContainerRequest) alloc.PodContainer {
	return alloc.PodContainer{ContainerRequest: r, Kind: alloc.App}
}

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		containers []alloc.PodContainer
		claims     []alloc.ContainerRequest
		want       Charge
	}{
		{"a share", []alloc.PodContainer{app(alloc.ContainerRequest{MemoryMiB: 4096, Compute: 30, Count: 1})},
			nil, Charge{4096, 30}},
		{"a share of two GPUs counts compute on each", []alloc.PodContainer{app(alloc.ContainerRequest{MemoryMiB: 8192, Compute: 50, Count: 2})},
			nil, Charge{8192, 100}},
		{"whole GPUs at the largest any model", []alloc.PodContainer{app(alloc.ContainerRequest{Exclusive: true, Count: 2})},
			nil, Charge{2 * 81920, 200}},
		{"whole GPUs at the largest of their models", []alloc.PodContainer{app(alloc.ContainerRequest{Exclusive: true, Count: 2, Models: []string{"Tesla T4"}})},
			nil, Charge{2 * 15360, 200}},
		{"a percent of memory", []alloc.PodContainer{app(alloc.ContainerRequest{MemoryPercent: 25, Compute: 10, Count: 1, Models: []string{"NVIDIA A100-SXM4-40GB"}})},
			nil, Charge{10240, 10}},
		{"MPS prices MPS GPUs only, whatever their health", []alloc.PodContainer{app(alloc.ContainerRequest{MemoryPercent: 50, Count: 1, MPS: true})},
			nil, Charge{20480, 0}},
		{"a filter does not lower the price", []alloc.PodContainer{app(alloc.ContainerRequest{Exclusive: true, Count: 1,
			Filter: &alloc.Filter{UUIDs: []string{"GPU-t4"}}})},
			nil, Charge{81920, 100}},
		{"app containers add up", []alloc.PodContainer{
			app(alloc.ContainerRequest{MemoryMiB: 1000, Compute: 10, Count: 1}),
			app(alloc.ContainerRequest{MemoryMiB: 2000, Compute: 20, Count: 1})},
			nil, Charge{3000, 30}},
		{"an init container beside the sidecars before it; the most of any phase", []alloc.PodContainer{
			{ContainerRequest: alloc.ContainerRequest{MemoryMiB: 2000, Compute: 5, Count: 1}, Kind: alloc.Sidecar},
			{ContainerRequest: alloc.ContainerRequest{MemoryMiB: 10000, Compute: 10, Count: 1}, Kind: alloc.Init},
			app(alloc.ContainerRequest{MemoryMiB: 4000, Compute: 50, Count: 1})},
			nil, Charge{12000, 55}},
		{"an init container before a sidecar does not run beside it", []alloc.PodContainer{
			{ContainerRequest: alloc.ContainerRequest{MemoryMiB: 5000, Count: 1}, Kind: alloc.Init},
			{ContainerRequest: alloc.ContainerRequest{MemoryMiB: 2000, Count: 1}, Kind: alloc.Sidecar},
			app(alloc.ContainerRequest{MemoryMiB: 1000, Count: 1})},
			nil, Charge{5000, 0}},
		{"claims are held beside the app containers", []alloc.PodContainer{app(alloc.ContainerRequest{MemoryMiB: 1000, Count: 1})},
			[]alloc.ContainerRequest{{MemoryMiB: 3000, Compute: 40, Count: 1}, {Exclusive: true, Count: 1, Models: []string{"Tesla T4"}}},
			Charge{1000 + 3000 + 15360, 140}},
		{"nothing", nil, nil, Charge{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Of(&alloc.PodRequest{Containers: tc.containers}, tc.claims, cluster)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Of = %+v, want %+v", got, tc.want)
			}
			if got.Zero() != (tc.want == Charge{}) {
				t.Errorf("Zero() = %v", got.Zero())
			}
		})
	}
}

func TestOfUnpriced(t *testing.T) {
	for _, r := range []alloc.ContainerRequest{
		{Name: "whole", Exclusive: true, Count: 1, Models: []string{"Tesla V100"}},
		{Name: "percent", MemoryPercent: 10, Count: 1, Models: []string{"Tesla T4"}, MPS: true},
	} {
		_, err := Of(&alloc.PodRequest{Containers: []alloc.PodContainer{app(r)}}, nil, cluster)
		if !errors.Is(err, ErrUnpriced) {
			t.Errorf("%s: err = %v, want ErrUnpriced", r.Name, err)
		}
	}
	// A request that names its memory needs no GPU to price it.
	got, err := Of(&alloc.PodRequest{Containers: []alloc.PodContainer{app(alloc.ContainerRequest{MemoryMiB: 512, Count: 1})}}, nil, nil)
	if err != nil || got != (Charge{512, 0}) {
		t.Errorf("Of with no GPUs = %+v, %v", got, err)
	}
	if _, err := Of(&alloc.PodRequest{}, []alloc.ContainerRequest{{Name: "claim/c/r", Exclusive: true, Count: 1}}, nil); !errors.Is(err, ErrUnpriced) {
		t.Errorf("a whole-GPU claim with no GPUs: err = %v", err)
	}
}
