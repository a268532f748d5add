package inventory

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

func usageAt(at time.Time, loads ...gpusharev1.GPULoad) *gpusharev1.GPUUsage {
	return &gpusharev1.GPUUsage{Time: metav1.NewTime(at), GPUs: loads}
}

func TestUsageMatters(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := usageAt(at, gpusharev1.GPULoad{Index: 0, UtilizationPercent: 40, UsedMemoryMiB: 8000},
		gpusharev1.GPULoad{Index: 1, UtilizationPercent: 0, UsedMemoryMiB: 0})
	for _, tc := range []struct {
		name string
		last *gpusharev1.GPUUsage
		want bool
	}{
		{"no last sample", nil, true},
		{"small moves", usageAt(at, gpusharev1.GPULoad{Index: 0, UtilizationPercent: 49, UsedMemoryMiB: 8511},
			gpusharev1.GPULoad{Index: 1, UtilizationPercent: 9, UsedMemoryMiB: 511}), false},
		{"utilisation by 10 points", usageAt(at, gpusharev1.GPULoad{Index: 0, UtilizationPercent: 30, UsedMemoryMiB: 8000},
			gpusharev1.GPULoad{Index: 1}), true},
		{"memory by 512 MiB", usageAt(at, gpusharev1.GPULoad{Index: 0, UtilizationPercent: 40, UsedMemoryMiB: 8000},
			gpusharev1.GPULoad{Index: 1, UsedMemoryMiB: 512}), true},
		{"a GPU fewer", usageAt(at, gpusharev1.GPULoad{Index: 0, UtilizationPercent: 40, UsedMemoryMiB: 8000}), true},
	} {
		if got := DefaultUsageThreshold.Matters(tc.last, base); got != tc.want {
			t.Errorf("%s: Matters = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// On the Node (a daemon without a lease), a sample that did not move
// enough is not written until UsageRefresh has passed.
func TestPublishUsageOnNodeOnlyWhenItMatters(t *testing.T) {
	f := newFakeNode()
	p := NewPublisher(f, "gpu-0", nil)
	f.pub = p
	ctx := context.Background()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	publish := func(d time.Duration, util int64) {
		t.Helper()
		if err := p.PublishUsage(ctx, usageAt(at.Add(d), gpusharev1.GPULoad{Index: 0, UtilizationPercent: util})); err != nil {
			t.Fatal(err)
		}
	}
	publish(0, 40)
	publish(30*time.Second, 45)
	if n := f.writes(); n != 1 {
		t.Fatalf("%d writes after a 5-point move, want 1", n)
	}
	publish(60*time.Second, 60)
	publish(90*time.Second, 61)
	if n := f.writes(); n != 2 {
		t.Fatalf("%d writes after a 20-point move, want 2", n)
	}
	publish(60*time.Second+UsageRefresh, 61)
	if n := f.writes(); n != 3 {
		t.Fatalf("%d writes once the last sample is %v old, want 3", n, UsageRefresh)
	}
	u, err := gpusharev1.ParseUsage(f.current().Annotations[gpusharev1.UsageAnnotation])
	if err != nil || u.GPUs[0].UtilizationPercent != 61 {
		t.Fatalf("node's usage %+v (%v), want the refreshed sample", u, err)
	}
}
