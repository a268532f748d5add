package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// startExtender runs gpushare-extender over plain HTTP on a free loopback
// port (where it needs no client certificates) with
// deploy/extender-config.yaml, bodies bounded at 1 MiB and extra flags,
// and returns its base URL.
func startExtender(t *testing.T, c *controlplane.Cluster, extra ...string) string {
	t.Helper()
	base, _ := runExtender(t, c, append([]string{"--max-request-bytes=1048576"}, extra...)...)
	return base
}

// runExtender runs gpushare-extender over plain HTTP on a free loopback
// port (--insecure-serve-unauthenticated: the verbs' tests call it
// directly) with deploy/extender-config.yaml and flags, and returns its
// base URL and process.
func runExtender(t *testing.T, c *controlplane.Cluster, flags ...string) (string, *controlplane.Process) {
	t.Helper()
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"--kubeconfig=" + accountKubeconfig(t, c, "extender"),
		"--bind-address=127.0.0.1", "--port=" + strconv.Itoa(port), "--insecure-serve-unauthenticated",
		"--config=" + root + "/deploy/extender-config.yaml", "-v=2"}, flags...)
	p, err := c.Run("gpushare-extender", extenderBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	notForbidden(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := controlplane.WaitHTTP(ctx, p, base+"/healthz", ""); err != nil {
		t.Fatal(err)
	}
	return base, p
}

// TestSeedsExtender: the seed examples schedule as their seeds say through
// stock kube-scheduler and gpushare-extender, which talk mutual TLS as
// deploy/extender-scheduler-config.yaml has them, with nodeCacheCapable
// true and false; with false, deploy/gpu-hook-policy.yaml is in force too
// (its hooks are left to the extender). The extender's metrics show that
// it bound the pods.
func TestSeedsExtender(t *testing.T) {
	t.Parallel()
	for _, cacheCapable := range []bool{true, false} {
		t.Run(fmt.Sprintf("nodeCacheCapable=%v", cacheCapable), func(t *testing.T) {
			c := startCluster(t)
			client, err := c.Client()
			if err != nil {
				t.Fatal(err)
			}
			if !cacheCapable {
				applyHookPolicy(t, client)
			}
			e := startSecureExtender(t, c)
			config := e.schedulerConfig(t)
			if !cacheCapable {
				config = bytes.ReplaceAll(config, []byte("nodeCacheCapable: true"), []byte("nodeCacheCapable: false"))
			}
			if _, err := c.StartScheduler(context.Background(), "kube-scheduler", tools.Bin("kube-scheduler"), config); err != nil {
				t.Fatal(err)
			}
			checkSeeds(t, client)
			resp, err := e.client.Get(e.base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if !strings.Contains(string(metrics), `gpushare_extender_requests_total{result="ok",verb="bind"}`) {
				t.Errorf("the extender bound no pod; its metrics:\n%s", metrics)
			}
		})
	}
}

// TestExtenderHostileInput: malformed and empty requests get a 400 with a
// reason, oversized ones 413, and the extender keeps serving.
func TestExtenderHostileInput(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	base := startExtender(t, c) + "/gpushare-scheduler"
	cases := []struct {
		verb, body, want string
		code             int
	}{
		{"filter", `{"pod":`, "malformed JSON", http.StatusBadRequest},
		{"filter", `not json`, "malformed JSON", http.StatusBadRequest},
		{"filter", `{}`, "request has no pod", http.StatusBadRequest},
		{"filter", `{"pod":{"metadata":{"name":"p"}}}`, "neither nodes nor nodeNames", http.StatusBadRequest},
		{"prioritize", `{"pod":{"metadata":{"name":"p"}},"nodenames":"x"}`, "malformed request", http.StatusBadRequest},
		{"bind", `{"podName":"p"}`, "bind needs podName, podNamespace and node", http.StatusBadRequest},
		{"bind", `[1,2,3]`, "malformed request", http.StatusBadRequest},
		{"filter", `{"pod":{},"nodenames":["a"],"padding":"` + strings.Repeat("x", 2<<20) + `"}`, "larger than 1048576 bytes", http.StatusRequestEntityTooLarge},
	}
	for _, tc := range cases {
		resp, err := http.Post(base+"/"+tc.verb, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s %.40q: %d %q; want %d with %q", tc.verb, tc.body, resp.StatusCode, body, tc.code, tc.want)
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

// TestExtenderFilterPassesTheBest: filter passes on only the best nodes by
// the node policy (binpack: the GPUs a 3 GiB share fills most, so the
// smallest): --max-filtered-nodes of them for a pod with a soft
// preference, the best alone for a pod without (--best-node-only, on by
// default). It reads the pod from its informer when the call names the
// version the informer holds.
func TestExtenderFilterPassesTheBest(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	base := startExtender(t, c, "--max-filtered-nodes=2") + "/gpushare-scheduler"
	ctx := context.Background()
	for name, mib := range map[string]int64{"g16": 16384, "g24": 24576, "g80": 81920, "g141": 144384} {
		if err := controlplane.CreateNode(ctx, client, controlplane.NodeSpec{Name: name, Model: "NVIDIA GPU", MemoryMiB: mib, Count: 1}); err != nil {
			t.Fatal(err)
		}
	}
	prefers := gpuPod("best", 3072, 0)
	prefers.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}}}
	pod, err := client.CoreV1().Pods("default").Create(ctx, prefers, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("plain", 3072, 0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"g141", "g16", "g80", "g24"}
	filter := func(p *corev1.Pod) ([]string, error) {
		body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: p, NodeNames: &names})
		if err != nil {
			return nil, err
		}
		resp, err := http.Post(base+"/filter", "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		var res extenderv1.ExtenderFilterResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			return nil, fmt.Errorf("filter answered %d: %w", resp.StatusCode, err)
		}
		if res.NodeNames == nil {
			return nil, fmt.Errorf("filter answered %d without node names", resp.StatusCode)
		}
		return *res.NodeNames, nil
	}
	want := []string{"g16", "g24"}
	check := func(what string, p *corev1.Pod, want []string) {
		t.Helper()
		var got []string
		err := waitFor(30*time.Second, func() (bool, error) {
			got, err = filter(p)
			return slices.Equal(got, want), err
		})
		if err != nil {
			t.Fatalf("%s: filter passed %v, want %v: %v", what, got, want, err)
		}
	}
	check("the pod with a preference", pod, want)
	check("the pod without", plain, []string{"g16"})
	// A copy asking no GPU, of the version the informer holds: the
	// informer's pod is rated, so the answer is the GPU pod's.
	bare := pod.DeepCopy()
	bare.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	check("the informer's version", bare, want)
	// Of another version: the call's own copy is rated, and a pod asking
	// no GPU passes every node.
	bare.ResourceVersion = "1"
	if got, err := filter(bare); err != nil || !slices.Equal(got, names) {
		t.Errorf("another version: filter passed %v (%v), want %v", got, err, names)
	}
}
