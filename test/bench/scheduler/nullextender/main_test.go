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

// TestRecordOf checks the floor's record: a gpushare allocation record
// that parses, names the node bound to and the pod's memory, as long as
// the one gpushare-extender writes for such a pod; and an error, not a
// record, for a pod the informer does not hold.
func TestRecordOf(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-00001", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{gpuMemory: *k8sresource.NewQuantity(10240, k8sresource.DecimalSI)},
		}}}},
	}
	if err := indexer.Add(pod); err != nil {
		t.Fatal(err)
	}
	pods := corelisters.NewPodLister(indexer)

	annotations, err := recordOf(pods, "default", "pod-00001", "node-04999")
	if err != nil {
		t.Fatal(err)
	}
	a, err := gpusharev1.ParseAllocation(annotations[gpusharev1.AllocationAnnotation])
	if err != nil {
		t.Fatalf("the record does not parse: %v (%q)", err, annotations)
	}
	if a.Node != "node-04999" || len(a.Containers) != 1 || a.Containers[0].Name != "main" ||
		len(a.Containers[0].GPUs) != 1 || a.Containers[0].GPUs[0].MemoryMiB != 10240 {
		t.Errorf("record %+v, want node-04999's GPU with 10240 MiB for container main", a)
	}

	if _, err := recordOf(pods, "default", "pod-00002", "node-04999"); err == nil {
		t.Error("a pod the informer does not hold got a record")
	}
}
