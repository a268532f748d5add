package app

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

func TestRun(t *testing.T) {
	inv, err := gpusharev1.Marshal(&gpusharev1.GPUInventory{GPUs: []gpusharev1.GPU{
		{Index: 0, UUID: "GPU-0", Model: "Tesla T4", MemoryMiB: 15360, Healthy: true}}})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "t4-0", Labels: map[string]string{gpusharev1.NodeLabel: "true"},
		Annotations: map[string]string{gpusharev1.InventoryAnnotation: inv}}}
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
