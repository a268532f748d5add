package main

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestClientRefusesGzip checks that the extender's client asks
// kube-apiserver for uncompressed responses in protobuf, as
// kube-scheduler's does: a client that accepts gzip gets every watch
// event of its informers compressed.
func TestClientRefusesGzip(t *testing.T) {
	var mu sync.Mutex
	var encodings, accepts []string
	// TLS, as every kube-apiserver serves: client-go hands a plain-HTTP
	// config Go's default transport, whatever the config says.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		encodings = append(encodings, r.Header.Get("Accept-Encoding"))
		accepts = append(accepts, r.Header.Get("Accept"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`))
	}))
	defer srv.Close()
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`", certificate-authority-data: "`+ca+`"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o := options{kubeconfig: kubeconfig, qps: 5, burst: 10}
	cfg, err := o.clientConfig()
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(encodings) != 1 {
		t.Fatalf("got %d requests, want 1", len(encodings))
	}
	if strings.Contains(encodings[0], "gzip") {
		t.Errorf("Accept-Encoding %q: the client accepts gzip", encodings[0])
	}
	if !strings.HasPrefix(accepts[0], "application/vnd.kubernetes.protobuf,") {
		t.Errorf("Accept %q, want protobuf first", accepts[0])
	}
}
