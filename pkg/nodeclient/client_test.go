package nodeclient

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/rest"
)

// request is what the fake apiserver saw of one request.
type request struct {
	method, path, accept, contentType string
	body                              []byte
}

// protobufServer answers every request with obj encoded as protobuf, as
// kube-apiserver does for a client that accepts it, and records what it
// was asked.
func protobufServer(t *testing.T, obj runtime.Object) (*rest.Config, func() []request) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var answer bytes.Buffer
	if err := protobuf.NewSerializer(scheme, scheme).Encode(obj, &answer); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []request
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, request{r.Method, r.URL.Path, r.Header.Get("Accept"), r.Header.Get("Content-Type"), body})
		mu.Unlock()
		if !strings.HasPrefix(r.Header.Get("Accept"), runtime.ContentTypeProtobuf) {
			http.Error(w, "this server speaks protobuf only", http.StatusNotAcceptable)
			return
		}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		_, _ = w.Write(answer.Bytes())
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}, func() []request {
		mu.Lock()
		defer mu.Unlock()
		return append([]request(nil), seen...)
	}
}

func TestClientSpeaksProtobuf(t *testing.T) {
	ctx := context.Background()
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec:       corev1.PodSpec{NodeName: "n1"}}
	cfg, seen := protobufServer(t, pod)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.GetPod(ctx, "ns", "p")
	if err != nil {
		t.Fatalf("GetPod: %v", err)
	}
	if got.UID != "u1" || got.Spec.NodeName != "n1" {
		t.Errorf("GetPod decoded %s on %q, want u1 on n1", got.UID, got.Spec.NodeName)
	}
	// The server answers with the pod whatever is asked: only the
	// request matters here.
	_, _ = c.PatchNode(ctx, "n1", []byte(`{"metadata":{"annotations":{"a":"b"}}}`))
	reqs := seen()
	if len(reqs) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		if !strings.HasPrefix(r.accept, runtime.ContentTypeProtobuf+",") {
			t.Errorf("%s %s: Accept %q, want protobuf first", r.method, r.path, r.accept)
		}
	}
	// A merge patch stays JSON whatever the client's content type.
	if p := reqs[1]; p.method != http.MethodPatch || p.contentType != "application/merge-patch+json" ||
		string(p.body) != `{"metadata":{"annotations":{"a":"b"}}}` {
		t.Errorf("patch sent as %s %s with %q: %s", p.method, p.path, p.contentType, p.body)
	}
}

func TestLeasesSpeakProtobuf(t *testing.T) {
	ctx := context.Background()
	holder := "node-a"
	lease := &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	cfg, seen := protobufServer(t, lease)
	l, err := NewLeases(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Get(ctx, "ns", "l")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.Spec.HolderIdentity == nil || *got.Spec.HolderIdentity != holder {
		t.Errorf("Get decoded holder %v, want %q", got.Spec.HolderIdentity, holder)
	}
	if _, err := l.Update(ctx, lease); err != nil {
		t.Fatalf("Update: %v", err)
	}
	reqs := seen()
	if len(reqs) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(reqs))
	}
	put := reqs[1]
	if put.method != http.MethodPut || put.contentType != runtime.ContentTypeProtobuf {
		t.Errorf("update sent as %s with %q, want PUT with protobuf", put.method, put.contentType)
	}
	if !bytes.HasPrefix(put.body, []byte("k8s\x00")) {
		t.Errorf("update body does not start with protobuf's magic: %q", put.body[:min(len(put.body), 8)])
	}
}
