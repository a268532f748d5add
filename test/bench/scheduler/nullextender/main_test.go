package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/record"
)

// TestFilterSpreads checks that filter passes each call's pod on one node
// it was given, a different one from call to call, and says so when it
// was given none.
func TestFilterSpreads(t *testing.T) {
	call := func(body string) (names []string, errText string) {
		w := httptest.NewRecorder()
		filter(w, httptest.NewRequest("POST", "/gpushare-scheduler/filter", strings.NewReader(body)))
		var got struct {
			NodeNames []string
			Error     string
		}
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("answer %q: %v", w.Body.String(), err)
		}
		return got.NodeNames, got.Error
	}
	body := `{"Pod":{"metadata":{"name":"p","annotations":{"a":"]"}}},"Nodes":null,"NodeNames":["node-a","node-b","node-c"]}`
	seen := map[string]bool{}
	for range 3 {
		names, errText := call(body)
		if errText != "" || len(names) != 1 {
			t.Fatalf("got %q, error %q; want one node", names, errText)
		}
		if !strings.HasPrefix(names[0], "node-") || len(names[0]) != len("node-a") {
			t.Fatalf("passed on %q, not one of the names given", names[0])
		}
		seen[names[0]] = true
	}
	if len(seen) != 3 {
		t.Errorf("three calls passed the pod on %d distinct nodes, want 3: %v", len(seen), seen)
	}
	for _, body := range []string{`{"Pod":{},"NodeNames":[]}`, `{"Pod":{}}`, `not json`} {
		if names, errText := call(body); errText == "" || names != nil {
			t.Errorf("%s: got %q, error %q; want an error and no node", body, names, errText)
		}
	}
}

// TestRecordOf checks the floor's record against the one gpushare writes
// for the same placement (record.Record, with what AskedOf gives a pod
// with no request annotations): the same text, so the same bytes for the
// control plane to store and stream. A pod that asks no GPU memory gets
// no record, and a pod the informer does not hold an error.
func TestRecordOf(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	pod := func(name string, limits corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
				Resources: corev1.ResourceRequirements{Limits: limits}}}},
		}
	}
	for _, p := range []*corev1.Pod{
		pod("pod-00001", corev1.ResourceList{gpuMemory: *k8sresource.NewQuantity(10240, k8sresource.DecimalSI)}),
		pod("pod-00002", nil),
	} {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	pods := corelisters.NewPodLister(indexer)

	got, err := recordOf(pods, "default", "pod-00001", "node-04999")
	if err != nil {
		t.Fatal(err)
	}
	a := record.Record(&alloc.Placement{Node: "node-04999", Containers: []alloc.ContainerPlacement{{
		Name: "main", Kind: alloc.App,
		GPUs: []alloc.Assignment{{GPU: 7, UUID: "GPU-node-04999-7", Usage: alloc.Usage{MemoryMiB: 10240}}},
	}}})
	a.Asked = gpusharev1.AskedOf(nil, nil)
	want, err := gpusharev1.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if got[gpusharev1.AllocationAnnotation] != want || len(got) != 1 {
		t.Errorf("record %q, want gpushare's own for the same placement %q", got, want)
	}

	if got, err := recordOf(pods, "default", "pod-00002", "node-04999"); err != nil || got != nil {
		t.Errorf("a pod that asks no GPU memory: record %q, error %v; want none and no error", got, err)
	}
	if _, err := recordOf(pods, "default", "pod-00003", "node-04999"); err == nil {
		t.Error("a pod the informer does not hold got a record")
	}
}
