package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/dra"
)

// Bad flags get a clear error before anything starts.
func TestRunRefusesBadFlags(t *testing.T) {
	for name, c := range map[string]struct {
		o    options
		want string
	}{
		"no node":    {options{resync: time.Second}, "--node-name"},
		"no resync":  {options{node: "n"}, "--resync=0s"},
		"bad sim":    {options{node: "n", resync: time.Second, simConfig: "/nonexistent/gpus.yaml"}, "/nonexistent/gpus.yaml"},
		"bad config": {options{node: "n", resync: time.Second, config: "/nonexistent/args.yaml"}, "--config: open /nonexistent/args.yaml"},
	} {
		err := run(klog.NewContext(context.Background(), klog.Background()), c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %q", name, err, c.want)
		}
	}
}

// /healthz answers while the process runs; /readyz only once the kubelet
// has registered the plugin, and says why not until then.
func TestHealth(t *testing.T) {
	srv := httptest.NewServer(health(&dra.Plugin{}))
	defer srv.Close()
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d; want %d", path, resp.StatusCode, want)
		}
	}
}
