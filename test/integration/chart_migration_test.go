package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
	gpurecord "github.com/gpushare/gpushare/pkg/record"
)

// migrationDoc is the page, and migrationHeading the section, whose steps
// TestChartMigrationFromAliyun runs.
const (
	migrationDoc     = "docs/install.md"
	migrationHeading = "## 7. Moving over from Aliyun's gpushare"
)

// docSteps returns the shell commands of the numbered steps of the
// section heading of the page rel: for each step number, the commands of
// its fenced sh blocks in order, each with its continuation lines joined.
func docSteps(t *testing.T, rel, heading string) map[int][]string {
	t.Helper()
	_, section, ok := strings.Cut(string(readFile(t, rel)), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", rel, heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	stepLine := regexp.MustCompile(`^(\d+)\. `)
	steps := map[int][]string{}
	step, inBlock, cmd := 0, false, ""
	for line := range strings.Lines(section) {
		line = strings.TrimRight(line, "\n")
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock && stepLine.MatchString(line):
			step, _ = strconv.Atoi(stepLine.FindStringSubmatch(line)[1])
		case !inBlock && trimmed == "```sh":
			inBlock = true
		case inBlock && trimmed == "```":
			inBlock = false
		case inBlock:
			if c, more := strings.CutSuffix(trimmed, `\`); more {
				cmd += c
				continue
			}
			steps[step] = append(steps[step], cmd+trimmed)
			cmd = ""
		}
	}
	return steps
}

// docShell runs the commands of the docs as an operator pastes them into
// bash in the repository's root: helm and kubectl are the pinned ones,
// on the cluster of kubeconfig; $REGISTRY and $VERSION are set. A
// command naming <gpu-node> runs once for each of nodes.
type docShell struct {
	env   []string
	nodes []string
	// dir, if set, is where the commands run instead of the repository's
	// root (for commands that write files there).
	dir string
}

func newDocShell(t *testing.T, c *controlplane.Cluster, nodes ...string) *docShell {
	t.Helper()
	bin := t.TempDir()
	for name, target := range map[string]string{"helm": helmBin(t), "kubectl": tools.Bin("kubectl")} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	home := t.TempDir()
	return &docShell{nodes: nodes, env: append(os.Environ(), "KUBECONFIG="+c.Kubeconfig,
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home,
		// Images kwok never pulls.
		"REGISTRY=gpushare-test", "VERSION=v0.0.0-test")}
}

func (s *docShell) run(t *testing.T, cmd string) {
	t.Helper()
	s.output(t, cmd)
}

// output runs cmd as run does and returns what it printed.
func (s *docShell) output(t *testing.T, cmd string) string {
	t.Helper()
	var all strings.Builder
	cmds := []string{cmd}
	if strings.Contains(cmd, "<gpu-node>") {
		cmds = cmds[:0]
		for _, n := range s.nodes {
			cmds = append(cmds, strings.ReplaceAll(cmd, "<gpu-node>", n))
		}
	}
	for _, cmd := range cmds {
		sh := exec.Command("bash", "-c", "set -eo pipefail\n"+cmd)
		sh.Dir, sh.Env = root, s.env
		if s.dir != "" {
			sh.Dir = s.dir
		}
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		t.Logf("$ %s\n%s", cmd, out)
		all.Write(out)
	}
	return all.String()
}

// aliyunExtender stands in for Aliyun's gpushare-schd-extender, as
// kube-scheduler calls it with Aliyun's configuration (plain HTTP, filter
// and bind, aliyun.com/gpu-mem managed but counted by kube-scheduler too).
// It places a pod on one GPU by binpack, each GPU holding the node's
// aliyun.com/gpu-mem capacity divided by its aliyun.com/gpu-count (what
// Aliyun's device plugin advertises), from the Aliyun records of the pods
// on the node; it binds the pod with its record, as Aliyun's does.
type aliyunExtender struct {
	client kubernetes.Interface
	srv    *httptest.Server
	mu     sync.Mutex
}

// aliyunSchedulerConfig is kube-scheduler's configuration with Aliyun's
// extender (Aliyun's scheduler-policy-config for v1.28 and later) at url.
func aliyunSchedulerConfig(url string) string {
	return `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
leaderElection:
  leaderElect: false
extenders:
- urlPrefix: "` + url + `/gpushare-scheduler"
  filterVerb: filter
  bindVerb: bind
  enableHTTPS: false
  nodeCacheCapable: true
  managedResources:
  - name: aliyun.com/gpu-mem
    ignoredByScheduler: false
  ignorable: false
`
}

func startAliyunExtender(t *testing.T, client kubernetes.Interface) *aliyunExtender {
	t.Helper()
	e := &aliyunExtender{client: client}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /gpushare-scheduler/filter", e.filter)
	mux.HandleFunc("POST /gpushare-scheduler/bind", e.bind)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

// free returns the GiB free on each GPU of node, by Aliyun's records.
func (e *aliyunExtender) free(ctx context.Context, node string) ([]int64, error) {
	n, err := e.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	mem, count := n.Status.Capacity["aliyun.com/gpu-mem"], n.Status.Capacity["aliyun.com/gpu-count"]
	if count.Value() == 0 {
		return nil, nil
	}
	free := make([]int64, count.Value())
	for i := range free {
		free[i] = mem.Value() / count.Value()
	}
	pods, err := e.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		idx, err := strconv.Atoi(p.Annotations[gpurecord.AliyunIndex])
		if err != nil || idx < 0 || idx >= len(free) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		free[idx] -= gpurecord.AliyunPodAmount(&p)
	}
	return free, nil
}

// pick returns the GPU of free that fits amount with the least room, -1
// for none.
func pick(free []int64, amount int64) int {
	best := -1
	for i, f := range free {
		if f >= amount && (best < 0 || f < free[best]) {
			best = i
		}
	}
	return best
}

func (e *aliyunExtender) filter(w http.ResponseWriter, r *http.Request) {
	var args extenderv1.ExtenderArgs
	res := &extenderv1.ExtenderFilterResult{FailedNodes: map[string]string{}}
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil || args.Pod == nil || args.NodeNames == nil {
		res.Error = fmt.Sprintf("bad request: %v", err)
	} else {
		e.mu.Lock()
		passed := []string{}
		for _, node := range *args.NodeNames {
			free, err := e.free(r.Context(), node)
			switch {
			case err != nil:
				res.FailedNodes[node] = err.Error()
			case pick(free, gpurecord.AliyunPodAmount(args.Pod)) < 0:
				res.FailedNodes[node] = "insufficient GPU memory in one GPU"
			default:
				passed = append(passed, node)
			}
		}
		e.mu.Unlock()
		res.NodeNames = &passed
	}
	_ = json.NewEncoder(w).Encode(res)
}

func (e *aliyunExtender) bind(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	res := &extenderv1.ExtenderBindingResult{}
	if err := e.doBind(r); err != nil {
		res.Error = err.Error()
	}
	_ = json.NewEncoder(w).Encode(res)
}

func (e *aliyunExtender) doBind(r *http.Request) error {
	ctx := r.Context()
	var args extenderv1.ExtenderBindingArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		return err
	}
	pod, err := e.client.CoreV1().Pods(args.PodNamespace).Get(ctx, args.PodName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	free, err := e.free(ctx, args.Node)
	if err != nil {
		return err
	}
	amount := gpurecord.AliyunPodAmount(pod)
	idx := pick(free, amount)
	if idx < 0 {
		return fmt.Errorf("no GPU of %s has %d GiB free", args.Node, amount)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		gpurecord.AliyunIndex: strconv.Itoa(idx), gpurecord.AliyunPod: strconv.FormatInt(amount, 10),
		"ALIYUN_COM_GPU_MEM_ASSIGNED": "false", "ALIYUN_COM_GPU_MEM_ASSUME_TIME": strconv.FormatInt(time.Now().UnixNano(), 10)}}})
	if _, err := e.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	return e.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: args.PodUID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: args.Node},
	}, metav1.CreateOptions{})
}

// runningPods waits up to a minute until the pods of selector in ns are
// all running, at least one, and returns them.
func runningPods(t *testing.T, client kubernetes.Interface, ns, selector string) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := waitFor(time.Minute, func() (bool, error) {
		list, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				pods = append(pods, p)
			}
		}
		return len(pods) > 0 && len(pods) == len(list.Items), nil
	})
	if err != nil {
		var seen []string
		if list, lerr := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector}); lerr == nil {
			for _, p := range list.Items {
				seen = append(seen, fmt.Sprintf("%s on %q: %s %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions))
			}
		}
		t.Fatalf("pods %q in %s: %v; there are %d: %v", selector, ns, err, len(seen), seen)
	}
	return pods
}

// scheduledAndRunning waits up to a minute until the pod runs and
// returns it; if it does not, the test fails with the pod's
// FailedScheduling events.
func scheduledAndRunning(t *testing.T, client kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := waitFor(time.Minute, func() (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err == nil {
		return pod
	}
	var why []string
	if evs, lerr := client.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{}); lerr == nil {
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == "FailedScheduling" {
				why = append(why, e.Note)
			}
		}
	}
	t.Fatalf("pod %s/%s (hooks %v) is not running, phase %q on node %q: %v; FailedScheduling: %q",
		ns, name, hooks(pod), pod.Status.Phase, pod.Spec.NodeName, err, why)
	return nil
}

// chartExtender is gpushare-extender run as the chart's DaemonSet runs it
// beside kube-scheduler, and what kube-scheduler needs to call it.
type chartExtender struct {
	proc *controlplane.Process
	// config is the chart's KubeSchedulerConfiguration, with the port
	// the extender was given and the client certificate's directory.
	config string
	// url and client reach it as kube-scheduler does (its /metrics).
	url    string
	client *http.Client
}

// startChartExtender runs pod, one of the chart's extender DaemonSet in
// ns, as a process with its service account's token, on free ports.
func startChartExtender(t *testing.T, c *controlplane.Cluster, client kubernetes.Interface, ns string, pod corev1.Pod) *chartExtender {
	t.Helper()
	ctx := context.Background()
	o := runOutside(t, c, client, &pod, "gpushare-extender")
	ports := map[string]int{}
	var args []string
	for _, a := range o.args(t) {
		for _, flag := range []string{"--port=", "--healthz-port="} {
			if strings.HasPrefix(a, flag) {
				port, err := controlplane.FreePort()
				if err != nil {
					t.Fatal(err)
				}
				ports[flag], a = port, flag+strconv.Itoa(port)
			}
		}
		args = append(args, a)
	}
	p, err := c.Run("gpushare-extender", extenderBin, append(args, "--kubeconfig="+o.kubeconfig)...)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := controlplane.WaitHTTP(wctx, p, "http://127.0.0.1:"+strconv.Itoa(ports["--healthz-port="])+"/healthz", ""); err != nil {
		t.Fatal(err)
	}
	config, secret := extenderSchedulerConfig(t, client, ns, ports["--port="])
	pair, err := tls.X509KeyPair(secret.Data["scheduler.crt"], secret.Data["scheduler.key"])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(secret.Data["ca.crt"])
	return &chartExtender{proc: p, config: config, url: "https://127.0.0.1:" + strconv.Itoa(ports["--port="]),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}}}}
}

// waitMetric waits up to 30 s until the extender's metric name, summed
// over the series with labels, is want.
func (e *chartExtender) waitMetric(t *testing.T, name string, labels map[string]string, want float64) {
	t.Helper()
	var got float64
	err := waitFor(30*time.Second, func() (bool, error) {
		v, err := metricSum(scrapeWith(t, e.client, e.url+"/metrics"), name, labels)
		got = v
		return err == nil && v == want, nil
	})
	if err != nil {
		t.Fatalf("gpushare-extender's %s%v is %v, want %v", name, labels, got, want)
	}
}

// startNodeDaemon runs gpushare-node as the pod of its DaemonSet in ns on
// spec's node has it, on spec's simulated GPUs, and waits until the node's
// GPUs are published. It returns the pod's args.
func startNodeDaemon(t *testing.T, c *controlplane.Cluster, client kubernetes.Interface, ns string, spec controlplane.NodeSpec) []string {
	t.Helper()
	var pod *corev1.Pod
	for _, p := range runningPods(t, client, ns, "app.kubernetes.io/component=node,app.kubernetes.io/instance=gpushare") {
		if p.Spec.NodeName == spec.Name {
			pod = &p
		}
	}
	if pod == nil {
		t.Fatalf("no gpushare-node pod runs on %s", spec.Name)
	}
	o := runOutside(t, c, client, pod, "gpushare-node")
	sim := filepath.Join(o.dir, "gpus.yaml")
	if err := os.WriteFile(sim, []byte(spec.SimulatedGPUs()), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	args := o.args(t)
	p, err := c.Run("gpushare-node-"+spec.Name, nodeBin(t), append(slices.Clone(args), "--kubeconfig="+o.kubeconfig,
		"--node-name="+spec.Name, "--simulated-gpus="+sim, "--no-device-plugin", "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port))...)
	if err != nil {
		t.Fatal(err)
	}
	notForbidden(t, p)
	err = waitFor(time.Minute, func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(context.Background(), spec.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := n.Annotations[gpusharev1.InventoryAnnotation]
		return ok, nil
	})
	if err != nil {
		t.Fatalf("gpushare-node did not publish %s's GPUs: %v\n%s", spec.Name, err, p.Tail(3000))
	}
	return args
}

// kubeletCapacity adds resources to the node's capacity and allocatable,
// as the kubelet reports device plugin resources.
func kubeletCapacity(t *testing.T, client kubernetes.Interface, node string, add map[corev1.ResourceName]int64) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for name, v := range add {
			n.Status.Capacity[name] = *k8sresource.NewQuantity(v, k8sresource.DecimalSI)
			n.Status.Allocatable[name] = *k8sresource.NewQuantity(v, k8sresource.DecimalSI)
		}
		_, err = client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hookPolicyInForce reports whether the chart installed the GPU hook
// policies, and if so waits until the API server enforces both, as
// installChart does.
func hookPolicyInForce(t *testing.T, client kubernetes.Interface) bool {
	t.Helper()
	_, err := client.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(context.Background(), "gpushare-gpu-hook", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false
	case err != nil:
		t.Fatal(err)
	}
	if err := controlplane.WaitHookPolicy(context.Background(), client); err != nil {
		t.Fatal(err)
	}
	return true
}

// TestChartMigrationFromAliyun runs docs/install.md's "Moving over from
// Aliyun's gpushare" as written: its helm and kubectl commands are read
// from the page and run in bash (only <gpu-node> is filled in), so that
// the page and the test cannot drift; what the steps say in words
// (kube-scheduler's configuration, and gpushare-node run for the pod its
// DaemonSet puts on the node) is done as TestChartExtender does it.
//
// Before: a GPU node labelled gpushare=true as Aliyun's guide says, with
// the capacity Aliyun's device plugin gives it (aliyun.com/gpu-mem in
// GiB, aliyun.com/gpu-count), Aliyun's device plugin DaemonSet and
// extender Deployment (objects only), and kube-scheduler calling a
// stand-in for Aliyun's extender (aliyunExtender) with Aliyun's
// configuration. Pods asking aliyun.com/gpu-mem, their specs unchanged
// (no schedulerName), are placed by it, and one carries a record naming
// a GPU the node lacks.
//
// After each step an unchanged Aliyun pod is created, and it is scheduled
// and runs; the one created after step 2 waits (FailedScheduling) until
// step 3 publishes the node's GPUs. gpushare books the pods Aliyun placed,
// before and after gpushare's install, where Aliyun recorded them: the
// pod after step 2 lands on the one GPU with room, a pod that fits no GPU
// is refused with the numbers, the extender's metrics show each GPU's
// booking, and the pod with the lost GPU is logged as step 5 says. After
// step 4 a tenant cannot write Aliyun's record. The pods Aliyun placed
// run on untouched throughout.
//
// With the hook policy on from step 1 (the chart's default on 1.36, as
// the page had it before), the pod created after step 1 stays Pending
// with "Insufficient gpushare.io/gpu-hook" and the test fails there; with
// step 2's upgrade left out (namespaces counting MiB) it passes.
func TestChartMigrationFromAliyun(t *testing.T) {
	t.Parallel()
	steps := docSteps(t, migrationDoc, migrationHeading)
	// Step 2's command (the hook route) is one a cluster may skip.
	for _, n := range []int{1, 3, 4, 5} {
		if len(steps[n]) == 0 {
			t.Fatalf("%s, %q: step %d has no commands (%v)", migrationDoc, migrationHeading, n, steps)
		}
	}
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "kube-system"
	// Two T4s of 15 GiB, as Aliyun's device plugin advertises them.
	gpuNode := controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 15360, Count: 2, Bare: true,
		Extended: map[corev1.ResourceName]int64{"aliyun.com/gpu-mem": 30, "aliyun.com/gpu-count": 2}}
	nodes := []controlplane.NodeSpec{gpuNode}
	for _, name := range controlPlaneNodes {
		nodes = append(nodes, controlplane.NodeSpec{Name: name, Bare: true})
	}
	createNodes(t, client, nodes...)
	patchNode := func(name, patch string) {
		t.Helper()
		if _, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patchNode(gpuNode.Name, `{"metadata":{"labels":{"gpushare":"true"}}}`)
	for _, name := range controlPlaneNodes {
		patchNode(name, `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}},`+
			`"spec":{"taints":[{"key":"node-role.kubernetes.io/control-plane","effect":"NoSchedule"}]}}`)
	}

	// Aliyun's system: its DaemonSet and Deployment (kwok runs their
	// pods; the stand-in serves), kube-scheduler calling its extender.
	labels := map[string]string{"app": "gpushare", "component": "gpushare-device-plugin"}
	dp := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "gpushare-device-plugin-ds", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"gpushare": "true"},
				Containers: []corev1.Container{{Name: "gpushare", Image: "aliyun/k8s-gpushare-plugin"}}}}}}
	if _, err := client.AppsV1().DaemonSets(ns).Create(ctx, dp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels = map[string]string{"app": "gpushare", "component": "gpushare-schd-extender"}
	one := int32(1)
	ext := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gpushare-schd-extender", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"node-role.kubernetes.io/control-plane": ""},
				Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Containers:  []corev1.Container{{Name: "gpushare-schd-extender", Image: "aliyun/k8s-gpushare-schd-extender"}}}}}}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, ext, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	aliyun := startAliyunExtender(t, client)
	kubeScheduler, err := c.StartScheduler(ctx, "kube-scheduler", tools.Bin("kube-scheduler"), []byte(aliyunSchedulerConfig(aliyun.srv.URL)))
	if err != nil {
		t.Fatal(err)
	}

	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// aliyunOn checks that the pod runs with Aliyun's record on GPU idx.
	aliyunOn := func(name, idx string) *corev1.Pod {
		t.Helper()
		p := scheduledAndRunning(t, client, "default", name)
		if got := p.Annotations[gpurecord.AliyunIndex]; p.Spec.NodeName != gpuNode.Name || got != idx {
			t.Fatalf("pod %s on %q with %s=%q; want %s, GPU %s", name, p.Spec.NodeName, gpurecord.AliyunIndex, got, gpuNode.Name, idx)
		}
		return p
	}
	// gpushareOn checks that gpushare placed the pod, running, with its
	// record and Aliyun's on the same GPU, and returns that GPU.
	gpushareOn := func(name string) int {
		t.Helper()
		p := scheduledAndRunning(t, client, "default", name)
		g := record(t, p).Containers[0].GPUs[0].Index
		if p.Annotations[gpurecord.AliyunIndex] != strconv.Itoa(g) {
			t.Errorf("pod %s: gpushare put it on GPU %d, Aliyun's record says %q", name, g, p.Annotations[gpurecord.AliyunIndex])
		}
		return g
	}

	// Before: what Aliyun placed. GPU 0 holds 10 GiB, GPU 1 12 GiB (its
	// binpack); "lost" names a GPU the node does not have (bound by hand).
	create(aliyunPod("default", "old-0", 10))
	aliyunOn("old-0", "0")
	create(aliyunPod("default", "old-1", 12))
	aliyunOn("old-1", "1")
	create(aliyunPlaced("default", "lost", gpuNode.Name, "7", 1))
	scheduledAndRunning(t, client, "default", "lost")
	old := map[string]*corev1.Pod{}
	for _, name := range []string{"old-0", "old-1", "lost"} {
		if old[name], err = client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	untouched := func(when string) {
		t.Helper()
		for name, was := range old {
			p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.UID != was.UID || p.Status.Phase != corev1.PodRunning || p.Annotations[gpurecord.AliyunIndex] != was.Annotations[gpurecord.AliyunIndex] {
				t.Errorf("%s: Aliyun's pod %s: UID %s, phase %s, %s=%q; want it running untouched", when, name,
					p.UID, p.Status.Phase, gpurecord.AliyunIndex, p.Annotations[gpurecord.AliyunIndex])
			}
		}
	}

	shell := newDocShell(t, c, gpuNode.Name)
	// Step 1: the chart, in extender mode, beside Aliyun's system.
	for _, cmd := range steps[1] {
		shell.run(t, cmd)
	}
	runningPods(t, client, ns, "app.kubernetes.io/name=gpushare-extender")
	t.Logf("after step 1 the GPU hook policy is in force: %v", hookPolicyInForce(t, client))
	if ds, err := client.AppsV1().DaemonSets(ns).Get(ctx, "gpushare-node", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if ds.Status.DesiredNumberScheduled != 0 {
		t.Errorf("after step 1 gpushare-node runs on %d nodes; want none (Aliyun's device plugin serves them)", ds.Status.DesiredNumberScheduled)
	}
	// Aliyun's extender goes on placing unchanged pods: 4 GiB fit GPU 0
	// only.
	create(aliyunPod("default", "after-1", 4))
	aliyunOn("after-1", "0")
	untouched("after step 1")

	// Step 2: kube-scheduler calls gpushare's extender instead of
	// Aliyun's (section 2's steps: the chart's configuration and client
	// certificate), then the page's commands.
	gext := startChartExtender(t, c, client, ns, runningPods(t, client, ns, "app.kubernetes.io/name=gpushare-extender")[0])
	notForbidden(t, gext.proc)
	kubeScheduler.Stop(10 * time.Second)
	if _, err := c.StartScheduler(ctx, "kube-scheduler-gpushare", tools.Bin("kube-scheduler"), []byte(gext.config)); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range steps[2] {
		shell.run(t, cmd)
	}
	hooked := hookPolicyInForce(t, client)
	t.Logf("after step 2 the GPU hook policy is in force: %v", hooked)
	// Until step 3 no node has published its GPUs: the pod waits.
	create(aliyunPod("default", "waiting", 2))
	failedSchedulingMessage(t, client, "default", "waiting", "")
	if p, err := client.CoreV1().Pods("default").Get(ctx, "waiting", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if want := map[bool][2]string{true: {"1", "1"}, false: {"-", "-"}}[hooked]; hooks(p)["main"] != want {
		t.Errorf("pod waiting holds hooks %v; want %v (hook policy %v)", hooks(p)["main"], want, hooked)
	}
	untouched("after step 2")

	// Step 3: Aliyun's device plugin goes, gpushare-node comes.
	for _, cmd := range steps[3] {
		shell.run(t, cmd)
	}
	if _, err := client.AppsV1().DaemonSets(ns).Get(ctx, dp.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Aliyun's device plugin DaemonSet after step 3: %v; want it deleted", err)
	}
	args := startNodeDaemon(t, c, client, ns, gpuNode)
	if slices.Contains(args, "--hook-memory") != hooked {
		t.Errorf("gpushare-node runs with %v; want --hook-memory %v, as the hook policy", args, hooked)
	}
	// The kubelet's next node status after gpushare-node registered its
	// device plugins (it publishes the GPUs once they are registered; the
	// kubelet reports capacity every 10 s): kube-scheduler retries the
	// pod its extender turned down on this change, not on the inventory
	// annotation alone.
	kubeletCapacity(t, client, gpuNode.Name, map[corev1.ResourceName]int64{gpusharev1.HookResource: 512})
	// GPU 0 holds 14 GiB (old-0 and after-1), GPU 1 12 GiB: the 2 GiB pod
	// fits GPU 1 alone.
	if g := gpushareOn("waiting"); g != 1 {
		t.Errorf("waiting landed on GPU %d; want 1, the one GPU with 2 GiB free", g)
	}
	for gpu, mib := range []float64{14336, 14336} {
		gext.waitMetric(t, "gpushare_gpu_memory_booked_bytes", map[string]string{"node": gpuNode.Name, "gpu": strconv.Itoa(gpu)}, mib*(1<<20))
	}
	create(aliyunPod("default", "too-big", 2))
	failedSchedulingMessage(t, client, "default", "too-big", "largest free share on any GPU is 1024 MiB, pod needs 2048 MiB")
	if err := client.CoreV1().Pods("default").Delete(ctx, "too-big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	create(aliyunPod("default", "after-3", 1))
	gpushareOn("after-3")
	untouched("after step 3")

	// Step 4: Aliyun's extender goes, the allocation policy comes.
	aliyun.srv.Close()
	for _, cmd := range steps[4] {
		shell.run(t, cmd)
	}
	if _, err := client.AppsV1().Deployments(ns).Get(ctx, ext.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Aliyun's extender Deployment after step 4: %v; want it deleted", err)
	}
	tenant := tenantClient(t, c, client, "tenant")
	var forged error
	err = waitFor(time.Minute, func() (bool, error) {
		_, forged = tenant.CoreV1().Pods("tenant").Create(ctx, aliyunPlaced("tenant", "forged", gpuNode.Name, "1", 1),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return forged != nil, nil
	})
	if err != nil || !strings.Contains(forged.Error(), "only gpushare's scheduler may set ALIYUN_COM_GPU_MEM_IDX") {
		t.Fatalf("after step 4 a tenant creates a pod with Aliyun's record: %v (%v)", forged, err)
	}
	create(aliyunPod("default", "after-4", 1))
	gpushareOn("after-4")
	untouched("after step 4")

	// Step 5: the extender names the pod it does not book, as the page's
	// grep finds it, and counts it.
	grep := regexp.MustCompile(`grep '([^']+)'`).FindStringSubmatch(strings.Join(steps[5], "\n"))
	if grep == nil {
		t.Fatalf("step 5's commands %q grep for nothing", steps[5])
	}
	found := false
	for l := range strings.Lines(gext.proc.Tail(1 << 20)) {
		if strings.Contains(l, grep[1]) && strings.Contains(l, `pod="default/lost"`) && strings.Contains(l, "has no GPU 7") {
			found = true
		}
	}
	if !found {
		t.Errorf("gpushare-extender's log has no line with %q for default/lost naming GPU 7", grep[1])
	}
	gext.waitMetric(t, "gpushare_allocation_records_refused", nil, 1)
}
