package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// startExtender runs gpushare-extender on a free loopback port with
// deploy/extender-config.yaml and returns its base URL.
func startExtender(t *testing.T, c *controlplane.Cluster) string {
	t.Helper()
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	p, err := c.Run("gpushare-extender", extenderBin, "--kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1", "--port="+strconv.Itoa(port),
		"--config="+root+"/deploy/extender-config.yaml", "--max-request-bytes=1048576", "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := controlplane.WaitHTTP(ctx, p, base+"/healthz", ""); err != nil {
		t.Fatal(err)
	}
	return base
}

// TestSeedsExtender: the seed examples schedule as their seeds say through
// stock kube-scheduler and gpushare-extender, with nodeCacheCapable true
// and false.
func TestSeedsExtender(t *testing.T) {
	for _, cacheCapable := range []bool{true, false} {
		t.Run(fmt.Sprintf("nodeCacheCapable=%v", cacheCapable), func(t *testing.T) {
			c := startCluster(t)
			client, err := c.Client()
			if err != nil {
				t.Fatal(err)
			}
			base := startExtender(t, c)
			config := readFile(t, "deploy/extender-scheduler-config.yaml")
			config = bytes.ReplaceAll(config, []byte("http://127.0.0.1:8888"), []byte(base))
			if !cacheCapable {
				config = bytes.ReplaceAll(config, []byte("nodeCacheCapable: true"), []byte("nodeCacheCapable: false"))
			}
			if _, err := c.StartScheduler(context.Background(), "kube-scheduler", tools.Bin("kube-scheduler"), config); err != nil {
				t.Fatal(err)
			}
			checkSeeds(t, client)
		})
	}
}

// TestExtenderHostileInput: malformed, oversized and empty requests get a
// 400 with a reason, and the extender keeps serving.
func TestExtenderHostileInput(t *testing.T) {
	c := startCluster(t)
	base := startExtender(t, c) + "/gpushare-scheduler"
	cases := []struct {
		verb, body, want string
	}{
		{"filter", `{"pod":`, "malformed JSON"},
		{"filter", `not json`, "malformed JSON"},
		{"filter", `{}`, "request has no pod"},
		{"filter", `{"pod":{"metadata":{"name":"p"}}}`, "neither nodes nor nodeNames"},
		{"prioritize", `{"pod":{"metadata":{"name":"p"}},"nodenames":"x"}`, "malformed request"},
		{"bind", `{"podName":"p"}`, "bind needs podName, podNamespace and node"},
		{"bind", `[1,2,3]`, "malformed request"},
		{"filter", `{"pod":{},"nodenames":["a"],"padding":"` + strings.Repeat("x", 2<<20) + `"}`, "larger than 1048576 bytes"},
	}
	for _, tc := range cases {
		resp, err := http.Post(base+"/"+tc.verb, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s %.40q: %d %q; want 400 with %q", tc.verb, tc.body, resp.StatusCode, body, tc.want)
		}
	}
	// A pod asking for an impossible share is answered, not rejected as
	// bad input: every node fails with the resource model's message.
	resp, err := http.Post(base+"/filter", "application/json", strings.NewReader(
		`{"pod":{"metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c","resources":{"limits":{"gpushare.io/gpu-core":"150"}}}]}},"nodenames":["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "FailedAndUnresolvableNodes") || !strings.Contains(string(body), "150") {
		t.Errorf("core 150: %d %s", resp.StatusCode, body)
	}
	if resp, err := http.Get(strings.TrimSuffix(base, "/gpushare-scheduler") + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("extender unhealthy after hostile input: %v", err)
	}
}
