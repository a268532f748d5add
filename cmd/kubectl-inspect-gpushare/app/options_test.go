package app

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/inspect"
)

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		output  string
		details bool
		wantErr bool
	}{
		"table":        {},
		"wide":         {output: "wide"},
		"json":         {output: "json"},
		"yaml":         {output: "yaml"},
		"details":      {details: true},
		"unknown":      {output: "csv", wantErr: true},
		"details+json": {output: "json", details: true, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := NewInspectOptions(genericiooptions.IOStreams{})
			o.Output, o.Details = tc.output, tc.details
			if err := o.Validate(); (err != nil) != tc.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

// t4Node is a gpushare node of one 15360 MiB Tesla T4.
func t4Node(t *testing.T) *corev1.Node {
	t.Helper()
	inv, err := gpusharev1.Marshal(&gpusharev1.GPUInventory{GPUs: []gpusharev1.GPU{
		{Index: 0, UUID: "GPU-0", Model: "Tesla T4", MemoryMiB: 15360, Healthy: true}}})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "t4-0", Labels: map[string]string{gpusharev1.NodeLabel: "true"},
		Annotations: map[string]string{gpusharev1.InventoryAnnotation: inv}}}
}

func TestRun(t *testing.T) {
	node := t4Node(t)
	cases := map[string]struct {
		output string
		want   string
	}{
		"table": {want: "t4-0  -          0/15"},
		"json":  {output: "json", want: `"name": "t4-0"`},
		"yaml":  {output: "yaml", want: "  name: t4-0"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			o := NewInspectOptions(streams)
			o.Clock = clocktesting.NewFakePassiveClock(time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC))
			o.Output, o.unit, o.client = tc.output, inspect.GiB, fake.NewClientset(node)
			if err := o.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestRunDefrag: `defrag` with a waiting whole-GPU pod and nothing that
// may move says so; with the flags it refuses, it says why.
func TestRunDefrag(t *testing.T) {
	node := t4Node(t)
	waiting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "two"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"gpushare.io/gpu-count": k8sresource.MustParse("2")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	o := NewInspectOptions(streams)
	o.defrag, o.unit, o.client = true, inspect.GiB, fake.NewClientset(node, waiting)
	if err := o.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := "default/two  0         none: no pod may move: none is booked"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	o.Details = true
	if err := o.Validate(); err == nil {
		t.Error("defrag with -d: want an error")
	}
	o.Details, o.MaxMoves = false, 0
	if err := o.Validate(); err == nil {
		t.Error("defrag with --max-moves 0: want an error")
	}
}
