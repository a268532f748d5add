package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// chartNamespace is where the tests install the chart: not kube-system,
// so that the chart's own namespace handling is exercised.
const chartNamespace = "gpushare-system"

// seedValues are the values the seeds need: seed 003's namespace counts
// aliyun.com/gpu-mem in MiB.
var seedValues = []string{"--set-json", `gpushare.resourceModel.unitOverrides=[{"name":"aliyun.com/gpu-mem","unit":"MiB","namespaces":["team-mib"]}]`}

// seedPools are the node pools of the seed nodes: whole GPUs on
// h100-whole-0, MPS on t4-0 (labelled gpushare.io/node-pool by
// installChart), shared GPUs elsewhere; one release serves them all.
var seedPools = []string{"--set-json", `node.pools=[{"name":"whole-card","wholeCard":true},{"name":"mps","mps":true}]`}

// seedPool returns the node pool of a seed node ("" for none).
func seedPool(s controlplane.NodeSpec) string {
	switch {
	case s.WholeCard:
		return "whole-card"
	case s.MPS:
		return "mps"
	}
	return ""
}

// stockSchedulerConfig is the cluster's own kube-scheduler, before
// gpushare: it schedules the chart's pods.
const stockSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
leaderElection:
  leaderElect: false
`

// controlPlaneNodes are the chart installs' control-plane nodes: no GPUs,
// labelled and tainted as kubeadm does.
var controlPlaneNodes = []string{"control-plane-1", "control-plane-2"}

// chartInstall is a control plane with the seed nodes (bare, labelled
// gpushare=true as seed 001 says) and the chart installed with values.
type chartInstall struct {
	c      *controlplane.Cluster
	client kubernetes.Interface
	// stock is the cluster's kube-scheduler.
	stock *controlplane.Scheduler
	// procs are the components run as the chart deploys them.
	procs []*controlplane.Process
}

func installChart(t *testing.T, values ...string) *chartInstall {
	t.Helper()
	ctx := context.Background()
	in := &chartInstall{c: startCluster(t)}
	var err error
	if in.client, err = in.c.Client(); err != nil {
		t.Fatal(err)
	}
	bare := make([]controlplane.NodeSpec, len(seedNodes))
	for i, s := range seedNodes {
		s.Bare = true
		bare[i] = s
	}
	for _, name := range controlPlaneNodes {
		bare = append(bare, controlplane.NodeSpec{Name: name, Bare: true})
	}
	createNodes(t, in.client, bare...)
	for _, s := range seedNodes {
		patch := []byte(`{"metadata":{"labels":{"gpushare":"true"}}}`)
		if pool := seedPool(s); pool != "" {
			patch = []byte(`{"metadata":{"labels":{"gpushare":"true","gpushare.io/node-pool":"` + pool + `"}}}`)
		}
		if _, err := in.client.CoreV1().Nodes().Patch(ctx, s.Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Control-plane nodes as kubeadm marks them, where an HA cluster's
	// kube-scheduler replicas run.
	for _, name := range controlPlaneNodes {
		patch := []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}},` +
			`"spec":{"taints":[{"key":"node-role.kubernetes.io/control-plane","effect":"NoSchedule"}]}}`)
		if _, err := in.client.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if in.stock, err = in.c.StartScheduler(ctx, "kube-scheduler", tools.Bin("kube-scheduler"), []byte(stockSchedulerConfig)); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"install", "gpushare", chart, "--kubeconfig", in.c.Kubeconfig,
		"--namespace", chartNamespace, "--create-namespace", "--wait", "--timeout", "3m"}, seedValues...)
	args = append(args, seedPools...)
	helm(t, append(args, values...)...)
	// The DaemonSets rolled out, each on the GPU nodes of its pool.
	want := map[string]int32{}
	for _, s := range seedNodes {
		name := "gpushare-node"
		if pool := seedPool(s); pool != "" {
			name += "-" + pool
		}
		want[name]++
	}
	for name, n := range want {
		ds, err := in.client.AppsV1().DaemonSets(chartNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s := ds.Status; s.DesiredNumberScheduled != n || s.NumberReady != s.DesiredNumberScheduled {
			t.Fatalf("DaemonSet %s: %d scheduled, %d ready; want %d", name, s.DesiredNumberScheduled, s.NumberReady, n)
		}
	}
	// The API server takes up the two hook policies one by one; until
	// both are in force GPU pods may be refused (docs/install.md).
	_, err = in.client.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, "gpushare-gpu-hook", metav1.GetOptions{})
	switch {
	case err == nil:
		if err := controlplane.WaitHookPolicy(ctx, in.client); err != nil {
			t.Fatal(err)
		}
	case !apierrors.IsNotFound(err):
		t.Fatal(err)
	}
	return in
}

// pods returns the running pods of a component; "node" is the node
// daemons of every pool.
func (in *chartInstall) pods(t *testing.T, component string) []corev1.Pod {
	t.Helper()
	selector := "app.kubernetes.io/name=gpushare-" + component
	if component == "node" {
		selector = "app.kubernetes.io/component=node,app.kubernetes.io/instance=gpushare"
	}
	var pods []corev1.Pod
	err := waitFor(time.Minute, func() (bool, error) {
		list, err := in.client.CoreV1().Pods(chartNamespace).List(context.Background(),
			metav1.ListOptions{LabelSelector: selector})
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
		t.Fatalf("pods of gpushare-%s: %v", component, err)
	}
	return pods
}

// startNodeDaemons runs gpushare-node for every pod of the DaemonSet, on
// its node's simulated GPUs, and waits until every node's GPUs are
// published.
func (in *chartInstall) startNodeDaemons(t *testing.T) {
	t.Helper()
	specs := map[string]controlplane.NodeSpec{}
	for _, s := range seedNodes {
		specs[s.Name] = s
	}
	for _, pod := range in.pods(t, "node") {
		spec, ok := specs[pod.Spec.NodeName]
		if !ok {
			t.Fatalf("gpushare-node pod %s runs on %s, not a GPU node", pod.Name, pod.Spec.NodeName)
		}
		o := runOutside(t, in.c, in.client, &pod, "gpushare-node")
		sim := filepath.Join(o.dir, "gpus.yaml")
		if err := os.WriteFile(sim, []byte(spec.SimulatedGPUs()), 0o600); err != nil {
			t.Fatal(err)
		}
		port, err := controlplane.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		// Simulated GPUs and no kubelet here; the node's name comes from
		// NODE_NAME (the downward API) in the pod.
		args := append(o.args(t), "--kubeconfig="+o.kubeconfig, "--node-name="+pod.Spec.NodeName,
			"--simulated-gpus="+sim, "--no-device-plugin", "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port))
		// Its pool's DaemonSet runs it with the pool's mode (without the
		// device plugins --mps only marks the inventory).
		if slices.Contains(args, "--whole-card") != spec.WholeCard || slices.Contains(args, "--mps") != spec.MPS {
			t.Errorf("gpushare-node pod %s on %s runs with %v; want --whole-card %v, --mps %v", pod.Name, spec.Name, args, spec.WholeCard, spec.MPS)
		}
		p, err := in.c.Run("gpushare-node-"+spec.Name, nodeBin(t), args...)
		if err != nil {
			t.Fatal(err)
		}
		in.procs = append(in.procs, p)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = controlplane.WaitHTTP(ctx, p, "http://127.0.0.1:"+strconv.Itoa(port)+"/healthz", "")
		cancel()
		if err != nil {
			t.Fatalf("gpushare-node on %s: %v", spec.Name, err)
		}
	}
	err := waitFor(time.Minute, func() (bool, error) {
		for _, s := range seedNodes {
			n, err := in.client.CoreV1().Nodes().Get(context.Background(), s.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if _, ok := n.Annotations[gpusharev1.InventoryAnnotation]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the node daemons did not publish every node's GPUs: %v", err)
	}
}

// startScheduler runs gpushare-scheduler as its Deployment's pod has it,
// with its service account's token, and returns the process.
func (in *chartInstall) startScheduler(t *testing.T, pod corev1.Pod) *controlplane.Process {
	t.Helper()
	o := runOutside(t, in.c, in.client, &pod, "gpushare-scheduler")
	// In a pod, kube-scheduler finds its credentials in the cluster; here
	// they are a kubeconfig with the same token.
	config := o.local(t, "/etc/gpushare/scheduler-config.yaml")
	raw, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	conn, _ := cfg["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	conn["kubeconfig"] = o.kubeconfig
	cfg["clientConnection"] = conn
	if raw, err = yaml.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	args := append(o.args(t), "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--authentication-kubeconfig="+o.kubeconfig, "--authorization-kubeconfig="+o.kubeconfig)
	p, err := in.c.Run("gpushare-scheduler-"+pod.Name, schedulerBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	in.procs = append(in.procs, p)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := controlplane.WaitHTTP(ctx, p, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", ""); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkHookRoute fails the test unless GPU memory took the hook route, the
// chart's default on a new install where the API server serves
// MutatingAdmissionPolicy v1: the node daemons serve no device per MiB,
// and every GPU container of the seed examples holds its hooks.
func (in *chartInstall) checkHookRoute(t *testing.T) {
	t.Helper()
	for _, pod := range in.pods(t, "node") {
		if !slices.Contains(pod.Spec.Containers[0].Args, "--hook-memory") {
			t.Errorf("gpushare-node pod %s runs with %v; want --hook-memory", pod.Name, pod.Spec.Containers[0].Args)
		}
	}
	pods, err := in.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gpuPods := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Namespace == chartNamespace || !asksForGPU(p) {
			continue
		}
		gpuPods++
		for c, h := range hooks(p) {
			if h[0] == "-" && containerAsksGPU(p, c) {
				t.Errorf("pod %s/%s: GPU container %s holds no hook", p.Namespace, p.Name, c)
			}
		}
	}
	if gpuPods == 0 {
		t.Error("no GPU pods to check")
	}
}

// containerAsksGPU reports whether pod's container name asks for a GPU
// resource.
func containerAsksGPU(pod *corev1.Pod, name string) bool {
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		if c.Name == name {
			one := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
			return asksForGPU(&one)
		}
	}
	return false
}

// checkNotForbidden fails the test if RBAC refused a component a request:
// a verb missing from its role.
func (in *chartInstall) checkNotForbidden(t *testing.T) {
	t.Helper()
	for _, p := range in.procs {
		for l := range strings.Lines(p.Tail(1 << 20)) {
			if strings.Contains(l, "is forbidden: User") {
				t.Errorf("%s was refused by RBAC: %s", p.Name, l)
			}
		}
	}
}

// TestChartInstall: the chart installs onto a real control plane, its
// DaemonSets roll out on the GPU nodes of their pools, and
// gpushare-scheduler and the node daemons, run as its objects say with its
// service accounts' tokens, schedule the seed examples; nothing is refused
// by RBAC. A second release is refused, docs/install.md's "Check" commands
// print what they say, helm upgrade to another node policy takes effect,
// and helm uninstall, after kube-scheduler is restored as the guide says,
// leaves nothing and a cluster that schedules.
func TestChartInstall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := installChart(t, "--set", "scheduler.replaceDefault=true")
	// One release serves the cluster: a second, in this namespace or
	// another, is refused with the reason.
	for _, second := range [][]string{{"second", chartNamespace}, {"gpushare", "default"}} {
		_, err := helmErr(t, "install", second[0], chart, "--kubeconfig", in.c.Kubeconfig, "--namespace", second[1],
			"--set", "mode=extender")
		if want := `gpushare is installed already (release "gpushare" in namespace "` + chartNamespace + `")`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a second release %s in %s: %v; want an error saying %q", second[0], second[1], err, want)
		}
	}
	// The operator removes kube-scheduler's static pod: gpushare-scheduler
	// serves default-scheduler from now on.
	in.stock.Stop(10 * time.Second)
	in.startNodeDaemons(t)
	in.checkDocCheck(t)
	sched := in.startScheduler(t, in.pods(t, "scheduler")[0])
	checkSeedPods(t, in.client)
	in.checkNotForbidden(t)
	in.checkHookRoute(t)

	// helm upgrade to the spread policy: the scheduler's pod is replaced
	// (its configuration's checksum changed), and the new one spreads.
	// Two replicas by default: the one run here leads, the other waits.
	before := map[string]bool{}
	for _, p := range in.pods(t, "scheduler") {
		before[p.Name] = true
	}
	if len(before) != 2 {
		t.Fatalf("%d gpushare-scheduler pods; want 2 by default", len(before))
	}
	helm(t, "upgrade", "gpushare", chart, "--kubeconfig", in.c.Kubeconfig, "--namespace", chartNamespace,
		"--reuse-values", "--set", "gpushare.nodePolicy=spread", "--wait", "--timeout", "3m")
	// Nothing schedules the new pods but gpushare-scheduler itself, which
	// still runs (an old pod is kept until a new one is ready).
	err := waitFor(time.Minute, func() (bool, error) {
		pods := in.pods(t, "scheduler")
		for _, p := range pods {
			if before[p.Name] {
				return false, nil
			}
		}
		return len(pods) == 2, nil
	})
	if err != nil {
		t.Fatalf("helm upgrade did not replace the scheduler's pods %v: %v", slices.Sorted(maps.Keys(before)), err)
	}
	sched.Stop(10 * time.Second)
	in.startScheduler(t, in.pods(t, "scheduler")[0])
	var placed []string
	for _, name := range []string{"spread-a", "spread-b"} {
		if _, err := in.client.CoreV1().Pods("default").Create(ctx, gpuPod(name, 1024, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		a := record(t, boundPod(t, in.client, "default", name))
		placed = append(placed, fmt.Sprintf("%s/%d", a.Node, a.Containers[0].GPUs[0].Index))
	}
	if placed[0] == placed[1] {
		t.Errorf("after helm upgrade to spread, two 1 GiB pods share GPU %s; spread puts them apart", placed[0])
	}
	in.checkNotForbidden(t)

	// Uninstall as docs/install.md says: kube-scheduler's static pod back
	// first (with replaceDefault nothing else schedules), then helm
	// uninstall: the pods' containers stop, and no object of the release
	// is left.
	stock, err := in.c.StartScheduler(ctx, "kube-scheduler-restored", tools.Bin("kube-scheduler"), []byte(stockSchedulerConfig))
	if err != nil {
		t.Fatal(err)
	}
	defer stock.Stop(10 * time.Second)
	for _, p := range in.procs {
		p.Stop(10 * time.Second)
	}
	helm(t, "uninstall", "gpushare", "--kubeconfig", in.c.Kubeconfig, "--namespace", chartNamespace, "--wait", "--timeout", "2m")
	in.checkUninstalled(t)
	in.checkDocCleanup(t)
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "after-uninstall", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := in.client.CoreV1().Pods("default").Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	boundPod(t, in.client, "default", plain.Name)
}

// checkDocCheck runs docs/install.md's "Check" commands that need no
// example applied (the node daemons' rollout and each GPU node's
// inventory) as an operator pastes them (runDoc): they succeed, and each
// GPU node's line shows its inventory annotation.
func (in *chartInstall) checkDocCheck(t *testing.T) {
	t.Helper()
	lines := docBlock(t, "docs/install.md", "### Check")
	if len(lines) < 2 || !strings.Contains(lines[0], "rollout status") || !strings.HasPrefix(lines[1], "kubectl get nodes") {
		t.Fatalf("docs/install.md's Check block begins %q; want the rollout and the nodes' inventory", lines)
	}
	runDoc(t, in.c, lines[0])
	out := runDoc(t, in.c, lines[1])
	shown := map[string]string{}
	for l := range strings.Lines(out) {
		name, gpus, _ := strings.Cut(strings.TrimSpace(l), " ")
		shown[name] = strings.TrimSpace(gpus)
	}
	for _, s := range seedNodes {
		n, err := in.client.CoreV1().Nodes().Get(context.Background(), s.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := n.Annotations[gpusharev1.InventoryAnnotation]; shown[s.Name] != want {
			t.Errorf("%s printed for %s %q; want its inventory %q\n%s", lines[1], s.Name, shown[s.Name], want, out)
		}
	}
}

// checkNotesExample runs the example the release's notes say to try, as
// an operator pastes it (runDoc): its three pods, selected by selector,
// are bound with gpushare's records, 3 GiB each on one GPU; and the
// command is one of docs/install.md's Check block.
func (in *chartInstall) checkNotesExample(t *testing.T, selector string) {
	t.Helper()
	notes := string(helm(t, "get", "notes", "gpushare", "--kubeconfig", in.c.Kubeconfig, "--namespace", chartNamespace))
	var apply string
	for l := range strings.Lines(notes) {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "kubectl apply -f ") {
			apply = l
		}
	}
	if apply == "" {
		t.Fatalf("the notes name no example to apply:\n%s", notes)
	}
	documented := false
	for _, l := range docBlock(t, "docs/install.md", "### Check") {
		documented = documented || strings.HasPrefix(l, apply+" ")
	}
	if !documented {
		t.Errorf("the notes' %q is not in docs/install.md's Check block", apply)
	}
	runDoc(t, in.c, apply)
	pods := boundPods(t, in.client, "default", selector, 3)
	first := record(t, &pods[0])
	for i := range pods {
		a := record(t, &pods[i])
		if g := a.Containers[0].GPUs; len(g) != 1 || g[0].MemoryMiB != 3072 || a.Node != first.Node || g[0].Index != first.Containers[0].GPUs[0].Index {
			t.Errorf("%s (from the notes' %q): %s on %s; want 3072 MiB on the GPU of the others", pods[i].Name, apply, describeAllocation(a), a.Node)
		}
	}
}

// runDoc runs a command of the docs in bash, as an operator pastes it,
// with c's kubeconfig, the control plane's kubectl and the chart's
// namespace for kube-system, and returns its output.
func runDoc(t *testing.T, c *controlplane.Cluster, cmd string) string {
	t.Helper()
	return runDocIn(t, c, cmd, chartNamespace)
}

// runDocIn is runDoc with ns for kube-system: the node daemons' leases
// are in kube-system whatever the chart's namespace.
func runDocIn(t *testing.T, c *controlplane.Cluster, cmd, ns string) string {
	t.Helper()
	cmd = strings.ReplaceAll(cmd, "kube-system", ns)
	sh := exec.Command("bash", "-c", cmd)
	sh.Dir = root
	sh.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig,
		"PATH="+filepath.Dir(tools.Bin("kubectl"))+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return string(out)
}

// docBlock returns the lines of the first fenced code block after heading
// in the file rel of the repository.
func docBlock(t *testing.T, rel, heading string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(string(readFile(t, rel)), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", rel, heading)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("%s: no code block after %q", rel, heading)
	}
	return strings.Split(strings.TrimSpace(block), "\n")
}

// checkDocCleanup runs docs/install.md's commands that remove, after
// helm uninstall, what the operator and the daemons wrote: then no node
// keeps a gpushare label or annotation, and no daemon's lease is left.
func (in *chartInstall) checkDocCleanup(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	cmds := docSteps(t, "docs/install.md", "## 6. Uninstall")[0]
	ran := 0
	for _, cmd := range cmds {
		if strings.HasPrefix(cmd, "helm uninstall") {
			continue
		}
		ns := chartNamespace
		if strings.Contains(cmd, "lease") {
			ns = "kube-system"
		}
		runDocIn(t, in.c, cmd, ns)
		ran++
	}
	if ran < 3 {
		t.Fatalf("docs/install.md's section 6 has %d cleanup commands (%v); want the annotations, labels and leases", ran, cmds)
	}
	nodes, err := in.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		for k := range n.Labels {
			if k == "gpushare" || strings.HasPrefix(k, "gpushare.io/") {
				t.Errorf("node %s keeps label %s after the doc's cleanup", n.Name, k)
			}
		}
		for k := range n.Annotations {
			if strings.HasPrefix(k, "gpushare.io/") {
				t.Errorf("node %s keeps annotation %s after the doc's cleanup", n.Name, k)
			}
		}
	}
	leases, err := in.client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, gpusharev1.LeasePrefix) {
			t.Errorf("lease kube-system/%s left after the doc's cleanup", l.Name)
		}
	}
}

// checkUninstalled fails the test if any object of the release is left:
// every listable resource of every API group is searched for the chart's
// labels.
func (in *chartInstall) checkUninstalled(t *testing.T) {
	t.Helper()
	checkNothingLeft(t, in.c, in.client)
}

// checkNothingLeft fails the test if any object labelled as gpushare's
// is left in the cluster of c.
func checkNothingLeft(t *testing.T, c *controlplane.Cluster, client kubernetes.Interface) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	lists, err := client.Discovery().ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	selectors := []string{"app.kubernetes.io/part-of=gpushare", "app.kubernetes.io/instance=gpushare"}
	err = waitFor(time.Minute, func() (bool, error) {
		var left []string
		for _, list := range lists {
			gv, err := schema.ParseGroupVersion(list.GroupVersion)
			if err != nil {
				return false, err
			}
			for _, r := range list.APIResources {
				if strings.Contains(r.Name, "/") || !strings.Contains(strings.Join(r.Verbs, ","), "list") {
					continue
				}
				for _, sel := range selectors {
					objs, err := dyn.Resource(gv.WithResource(r.Name)).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
					if err != nil {
						continue
					}
					for _, o := range objs.Items {
						left = append(left, fmt.Sprintf("%s %s/%s", r.Kind, o.GetNamespace(), o.GetName()))
					}
				}
			}
		}
		if len(left) > 0 {
			t.Logf("left after helm uninstall: %v", left)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("helm uninstall left objects behind: %v", err)
	}
}

// TestChartExtender: in extender mode the chart runs one extender on each
// control-plane node (beside each kube-scheduler replica), in the host
// network on 127.0.0.1; the cluster's kube-scheduler, with the
// KubeSchedulerConfiguration and client certificate the chart renders,
// calls gpushare-extender run as the chart's DaemonSet says, with its
// service account's token; the seed examples schedule and nothing is
// refused by RBAC.
func TestChartExtender(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := installChart(t, "--set", "mode=extender")
	in.startNodeDaemons(t)

	pods := in.pods(t, "extender")
	on := map[string]bool{}
	for _, p := range pods {
		on[p.Spec.NodeName] = true
		if !p.Spec.HostNetwork || !slices.Contains(p.Spec.Containers[0].Args, "--bind-address=127.0.0.1") {
			t.Errorf("extender pod %s: host network %v, args %v; want the host network and 127.0.0.1", p.Name, p.Spec.HostNetwork, p.Spec.Containers[0].Args)
		}
	}
	if len(pods) != len(controlPlaneNodes) || !on[controlPlaneNodes[0]] || !on[controlPlaneNodes[1]] {
		t.Fatalf("extender pods on %v, want one on each of %v", on, controlPlaneNodes)
	}
	if _, err := in.client.CoreV1().Services(chartNamespace).Get(ctx, "gpushare-extender", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Service gpushare-extender: %v, want none beside kube-scheduler", err)
	}

	// The extender as the DaemonSet runs it; kube-scheduler with the
	// operator's steps done (extenderSchedulerConfig).
	e := startChartExtender(t, in.c, in.client, chartNamespace, pods[0])
	in.procs = append(in.procs, e.proc)
	in.stock.Stop(10 * time.Second)
	if _, err := in.c.StartScheduler(ctx, "kube-scheduler-gpushare", tools.Bin("kube-scheduler"), []byte(e.config)); err != nil {
		t.Fatal(err)
	}
	checkSeedPods(t, in.client)
	in.checkNotForbidden(t)
}

// TestChartSecondScheduler: with the default values gpushare-scheduler is
// a second scheduler, gpu-scheduler, beside the cluster's; with two
// replicas one leads (the lease of the release's namespace) and schedules,
// and when it stops the other takes over. Its PodDisruptionBudget keeps
// one running.
func TestChartSecondScheduler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := installChart(t, "--set", "scheduler.replicas=2", "--set", "scheduler.podDisruptionBudget.enabled=true")
	if _, err := in.client.PolicyV1().PodDisruptionBudgets(chartNamespace).Get(ctx, "gpushare-scheduler", metav1.GetOptions{}); err != nil {
		t.Errorf("the PodDisruptionBudget: %v", err)
	}
	in.startNodeDaemons(t)
	pods := in.pods(t, "scheduler")
	if len(pods) != 2 {
		t.Fatalf("%d gpushare-scheduler pods; want 2", len(pods))
	}
	procs := []*controlplane.Process{in.startScheduler(t, pods[0]), in.startScheduler(t, pods[1])}
	// leader returns the one process that leads.
	leader := func(among []*controlplane.Process) *controlplane.Process {
		t.Helper()
		var lead []*controlplane.Process
		err := waitFor(time.Minute, func() (bool, error) {
			lead = lead[:0]
			for _, p := range among {
				if strings.Contains(p.Tail(1<<20), `"Successfully acquired lease" lock="`+chartNamespace+`/gpushare-scheduler"`) {
					lead = append(lead, p)
				}
			}
			return len(lead) > 0, nil
		})
		if err != nil || len(lead) != 1 {
			t.Fatalf("%d of %d gpushare-schedulers lead (%v); want one", len(lead), len(among), err)
		}
		return lead[0]
	}
	schedule := func(name string) string {
		t.Helper()
		pod := gpuPod(name, 1024, 0)
		pod.Spec.SchedulerName = "gpu-scheduler"
		if _, err := in.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return record(t, boundPod(t, in.client, "default", name)).Node
	}
	first := leader(procs)
	in.checkNotesExample(t, "app=binpack-gpu")
	schedule("first")
	first.Stop(10 * time.Second)
	var rest []*controlplane.Process
	for _, p := range procs {
		if p != first {
			rest = append(rest, p)
		}
	}
	leader(rest)
	schedule("second")
	in.checkNotForbidden(t)
}

// extenderSchedulerConfig does the operator's steps for kube-scheduler in
// extender mode: kube-scheduler's client certificate from the Secret the
// chart made in ns into a directory (/etc/kubernetes/gpushare-extender/
// on a real node), and the chart's KubeSchedulerConfiguration pointing at
// it and at the extender's port on 127.0.0.1. It returns the
// configuration and the Secret.
func extenderSchedulerConfig(t *testing.T, client kubernetes.Interface, ns string, port int) (string, *corev1.Secret) {
	t.Helper()
	ctx := context.Background()
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "gpushare-kube-scheduler-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := client.CoreV1().Secrets(ns).Get(ctx, "gpushare-extender-client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tlsDir := t.TempDir()
	for k, v := range secret.Data {
		if err := os.WriteFile(filepath.Join(tlsDir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config := cm.Data["kube-scheduler-config.yaml"]
	for old, repl := range map[string]string{
		"https://127.0.0.1:10262/":           "https://127.0.0.1:" + strconv.Itoa(port) + "/",
		"/etc/kubernetes/gpushare-extender/": tlsDir + "/",
	} {
		if !strings.Contains(config, old) {
			t.Fatalf("the chart's kube-scheduler configuration lacks %q:\n%s", old, config)
		}
		config = strings.ReplaceAll(config, old, repl)
	}
	return config, secret
}
