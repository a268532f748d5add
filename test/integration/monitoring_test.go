package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/deviceplugin/kubelettest"
	"github.com/gpushare/gpushare/pkg/deviceplugin/runtimetest"
	"github.com/gpushare/gpushare/pkg/quota"
)

// The dashboard and the alerts, as the chart ships them.
const (
	dashboardFile = "charts/gpushare/files/dashboard.json"
	alertsFile    = "charts/gpushare/files/alerts.yaml"
)

// noDataHere names the metrics a panel may show that this test cannot
// make: their queries need only parse. Keep it short.
var noDataHere = map[string]string{
	// CgroupPodOf finds a GPU process's pod in its cgroup; the simulated
	// GPUs' processes belong to no pod.
	"gpushare_pod_gpu_memory_used_bytes": "per-pod GPU memory needs processes in a pod's cgroup",
}

// TestMonitoringRules: the alerts load (promtool check rules) and their
// unit tests pass (alerts_test.yaml beside them).
func TestMonitoringRules(t *testing.T) {
	t.Parallel()
	promtool := monitoringTool(t, "GPUSHARE_PROMTOOL")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Join(root, filepath.Dir(alertsFile))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestMonitoring runs Prometheus against gpushare-scheduler, a
// gpushare-node of 8 simulated GPUs whose device plugin has started three
// pods' containers, with one more pod that fits no GPU, and the quota
// webhook with a team's quota and a pod charged to it; then every query
// of the dashboard must return data and every alert must evaluate. A
// metric renamed in the code fails here instead of blanking a panel. The
// components' gpushare_* metrics must pass promtool check metrics (naming
// conventions).
func TestMonitoring(t *testing.T) {
	t.Parallel()
	prometheus := monitoringTool(t, "GPUSHARE_PROMETHEUS")
	promtool := monitoringTool(t, "GPUSHARE_PROMTOOL")
	c, client, s := startPlugin(t, nil)
	ctx := context.Background()
	bareNode(t, client, "gpu-0")
	dir := socketDir(t)
	kubelet := kubelettest.Start(t, dir)
	files := map[string]string{
		"gpus.yaml": "gpus:\n- {model: Tesla T4, memoryMiB: 16384, count: 8, numaNodes: 2, nvlink: pairs}\n" +
			"usage:\n- {index: 0, usedMemoryMiB: 3000, utilizationPercent: 40, processes: [{pid: 4242, usedMemoryMiB: 3000}]}\n",
		"args.yaml": "apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nresourceModel:\n  resources:\n" +
			"  - {name: gpushare.io/gpu-mem, kind: Memory}\n  - {name: gpushare.io/gpu-core, kind: Compute}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	nodePort, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	n := &gpuNode{client: client, kubelet: kubelet, cdiDir: filepath.Join(dir, "cdi"), podMiB: 1024}
	if n.runtime, err = runtimetest.New(n.cdiDir); err != nil {
		t.Fatal(err)
	}
	if n.daemon, err = c.Run("gpushare-node", nodeBin(t), "--kubeconfig="+c.Kubeconfig, "--node-name=gpu-0",
		"--simulated-gpus="+filepath.Join(dir, "gpus.yaml"), "--config="+filepath.Join(dir, "args.yaml"),
		"--device-plugin-dir="+dir, "--pod-resources-socket="+kubelet.PodResourcesSocket(), "--cdi-dir="+n.cdiDir,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(nodePort), "--usage-interval=0"); err != nil {
		t.Fatal(err)
	}
	kubelet.WaitAllocatable("gpushare.io/gpu-mem", 8*16384)
	n.burst(t, "mon", 3)
	// A pod no 16 GiB GPU can hold stays pending, rejected by GPUShare.
	if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("too-big", 20000, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The quota webhook, a team's quota and a pod charged to it.
	webhook := startWebhook(t, c)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createQuota(t, client, "team-a", corev1.ResourceList{"requests." + quota.MemoryResource: k8sresource.MustParse("8Gi"),
		"requests." + quota.ComputeResource: k8sresource.MustParse("200")})
	if _, err := client.CoreV1().Pods("team-a").Create(ctx, withLimits(gpuPod("charged", 1024, 10), "team-a", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	schedulerURL, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	webhookURL, err := url.Parse(webhook.URL)
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]string{
		"gpushare-scheduler-metrics": s.URL + "/metrics",
		"gpushare-node-metrics":      "http://127.0.0.1:" + strconv.Itoa(nodePort) + "/metrics",
		"gpushare-webhook-metrics":   webhook.URL + "/metrics",
	}
	for job, u := range targets {
		checkMetricNames(t, promtool, job, u)
	}
	api := startPrometheus(t, c, prometheus, fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
- job_name: gpushare-scheduler-metrics
  scheme: https
  tls_config: {insecure_skip_verify: true}
  static_configs: [{targets: [%q]}]
- job_name: gpushare-node-metrics
  static_configs: [{targets: ["127.0.0.1:%d"]}]
- job_name: gpushare-webhook-metrics
  scheme: https
  tls_config: {insecure_skip_verify: true}
  static_configs: [{targets: [%q]}]
`, filepath.Join(root, alertsFile), schedulerURL.Host, nodePort, webhookURL.Host))

	panels := dashboardQueries(t)
	rules := ruleQueries(t)
	t.Logf("%d dashboard queries, %d alerts", len(panels), len(rules))
	// Until every panel has data: rates need two scrapes, and the pending
	// pod a scheduling attempt.
	empty := map[string]string{}
	err = waitFor(90*time.Second, func() (bool, error) {
		clear(empty)
		for _, q := range panels {
			n, err := api.query(q.expr)
			if err != nil {
				return false, fmt.Errorf("%s: %q: %w", q.where, q.expr, err)
			}
			if n == 0 && exempt(q.expr) == "" {
				empty[q.where] = q.expr
			}
		}
		if len(empty) > 0 {
			time.Sleep(time.Second) // a scrape
		}
		return len(empty) == 0, nil
	})
	if err != nil && !errors.Is(err, errTimeout) {
		t.Fatal(err)
	}
	for where, expr := range empty {
		t.Errorf("%s returns no data: %s", where, expr)
	}
	// The alerts: each parses and evaluates, and names only metrics the
	// components serve.
	known, err := api.metricNames()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range append(rules, panels...) {
		if _, err := api.query(q.expr); err != nil {
			t.Errorf("%s: %q: %v", q.where, q.expr, err)
		}
		for _, name := range metricName.FindAllString(q.expr, -1) {
			if !slices.Contains(known, name) && noDataHere[name] == "" {
				t.Errorf("%s uses %s, which no component serves", q.where, name)
			}
		}
	}
	if err := api.rulesHealthy(); err != nil {
		t.Error(err)
	}
}

// monitoringTool returns the binary that the environment variable names
// (set by the Makefile, which builds it).
func monitoringTool(t *testing.T, env string) string {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
	bin := os.Getenv(env)
	if bin == "" {
		if os.Getenv("GPUSHARE_REQUIRE_CLUSTER") == "1" {
			t.Fatalf("%s is not set: run the test through make", env)
		}
		t.Skipf("%s is not set (make prometheus builds it)", env)
	}
	return bin
}

// metricName matches the names of the components' metrics in a query.
var metricName = regexp.MustCompile(`\b(gpushare|scheduler)_[a-z0-9_]+\b`)

func exempt(expr string) string {
	for _, name := range metricName.FindAllString(expr, -1) {
		if why := noDataHere[name]; why != "" {
			return why
		}
	}
	return ""
}

type query struct{ where, expr string }

// dashboardQueries returns every panel target's expression, Grafana's
// interval variables replaced.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []panel `json:"panels"`
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(readFile(t, dashboardFile), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1m")
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				expr := vars.Replace(tg.Expr)
				if strings.Contains(expr, "$") {
					t.Errorf("panel %q: a variable the test does not know in %s", p.Title, tg.Expr)
				}
				out = append(out, query{where: fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), expr: expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if len(out) == 0 {
		t.Fatalf("%s has no queries", dashboardFile)
	}
	return out
}

// ruleQueries returns every alert's and recording rule's expression.
func ruleQueries(t *testing.T) []query {
	t.Helper()
	var f struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert  string `json:"alert"`
				Record string `json:"record"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(readFile(t, alertsFile), &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, query{where: "rule " + g.Name + "/" + r.Alert + r.Record, expr: r.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", alertsFile)
	}
	return out
}

// checkMetricNames runs promtool check metrics on what u serves and fails
// on its complaints about gpushare's own metrics (kube-scheduler's are
// Kubernetes').
func checkMetricNames(t *testing.T, promtool, job, u string) {
	t.Helper()
	body, err := get(u)
	if err != nil {
		t.Fatalf("%s: %v", job, err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, _ := cmd.CombinedOutput() // exits non-zero on any complaint
	for l := range strings.Lines(string(out)) {
		if strings.HasPrefix(l, "gpushare_") {
			t.Errorf("%s: promtool check metrics: %s", job, strings.TrimSpace(l))
		}
	}
	// promtool no longer checks this one: _total is for counters.
	for l := range strings.Lines(string(body)) {
		f := strings.Fields(l)
		if len(f) == 4 && f[1] == "TYPE" && strings.HasPrefix(f[2], "gpushare_") && strings.HasSuffix(f[2], "_total") && f[3] != "counter" {
			t.Errorf("%s: %s is a %s; only counters end in _total", job, f[2], f[3])
		}
	}
}

// get reads u. Each call has a client of its own, which keeps no
// connection open: left idle, they pile up to Prometheus's limit.
func get(u string) ([]byte, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test server on 127.0.0.1
	}}
	resp, err := client.Get(u)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
	}
	return body, nil
}

// promAPI is a Prometheus's HTTP API.
type promAPI string

// startPrometheus runs prometheus with config, its storage in a temporary
// directory, on a free loopback port, and waits until it is ready.
func startPrometheus(t *testing.T, c *controlplane.Cluster, bin, config string) promAPI {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if _, err := c.Run("prometheus", bin, "--config.file="+path, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr); err != nil {
		t.Fatal(err)
	}
	err = waitFor(30*time.Second, func() (bool, error) {
		_, err := get("http://" + addr + "/-/ready")
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("prometheus is not ready: %v", err)
	}
	return promAPI("http://" + addr + "/api/v1")
}

// query runs an instant query and returns how many series (or 1 for a
// scalar) it returned; a query that does not parse or evaluate is an
// error.
func (a promAPI) query(expr string) (int, error) {
	var r struct {
		Data struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := a.get("/query?query="+url.QueryEscape(expr), &r); err != nil {
		return 0, err
	}
	if r.Data.ResultType == "scalar" || r.Data.ResultType == "string" {
		return 1, nil
	}
	var series []json.RawMessage
	if err := json.Unmarshal(r.Data.Result, &series); err != nil {
		return 0, err
	}
	return len(series), nil
}

// metricNames returns the names of every series Prometheus holds.
func (a promAPI) metricNames() ([]string, error) {
	var r struct {
		Data []string `json:"data"`
	}
	err := a.get("/label/__name__/values", &r)
	return r.Data, err
}

// rulesHealthy fails if a rule's last evaluation failed.
func (a promAPI) rulesHealthy() error {
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := a.get("/rules", &r); err != nil {
		return err
	}
	var bad []string
	var count int
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			count++
			if rule.Health != "ok" {
				bad = append(bad, fmt.Sprintf("%s: %s %s", rule.Name, rule.Health, rule.LastError))
			}
		}
	}
	if count == 0 {
		return fmt.Errorf("prometheus loaded no rules")
	}
	if bad != nil {
		return fmt.Errorf("rules not evaluated: %s", strings.Join(bad, "; "))
	}
	return nil
}

// get calls the API and decodes its answer into v; an error answer (a
// query that does not parse) is an error.
func (a promAPI) get(path string, v any) error {
	body, err := get(string(a) + path)
	if err != nil {
		return err
	}
	var status struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal(body, &status); err != nil {
		return err
	}
	if status.Status != "success" {
		return fmt.Errorf("%s", status.Error)
	}
	return json.Unmarshal(body, v)
}
