package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	configv1 "github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

type options struct {
	dir, scheduler, nodeDaemon, config, examples, schedulerRBAC, nodeRBAC, hookPolicy, allocationPolicy string
	// draDaemon, draRBAC and draClass run gpushare-dra on the real node.
	draDaemon, draRBAC, draClass string
	// realNode is auto, on or off; probeImage the real node's workload
	// image.
	realNode, probeImage string
	// realNodePrivate runs the real node in a mount namespace of its own
	// (controlplane.RealNodeOptions.Private).
	realNodePrivate bool
	// webhook, webhookRBAC and quotaWebhook run gpushare-webhook for the
	// teams' quotas and pods in teams; webhook empty leaves them out.
	webhook, webhookRBAC, quotaWebhook, teams string
}

// nodes are the demo's simulated GPU nodes.
var nodes = []controlplane.NodeSpec{
	{Name: "h100-0", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Count: 8},
	{Name: "h200-0", Model: "NVIDIA H200", MemoryMiB: 143771, Count: 8},
	{Name: "t4-0", Model: "Tesla T4", MemoryMiB: 15360, Count: 4, MPS: true},
	{Name: "l4-0", Model: "NVIDIA L4", MemoryMiB: 23034, Count: 2},
	{Name: "a100-whole-0", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: 4, WholeCard: true},
}

const pidFile = "pids"

func up(ctx context.Context, o options) (err error) {
	if running(o.dir) {
		return errRunning
	}
	config, err := os.ReadFile(o.config)
	if err != nil {
		return err
	}
	// A real node an earlier demo left (killed before make demo-down)
	// holds mounts under dir.
	if err := stopRealNode(o.dir); err != nil {
		return err
	}
	if err := os.RemoveAll(o.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	step("starting etcd, kube-apiserver (serving the Workload API: " + strings.Join(controlplane.WorkloadAPI, " ") + "), kube-controller-manager (" + controlplane.WorkloadAPI[0] + ": a deleted PodGroup's finalizer is removed) and kwok")
	// The demo keeps running: its kwok nodes renew Leases, so that a
	// stall of the machine or a restart of kwok leaves them Ready.
	c, err := controlplane.Start(ctx, controlplane.Options{Dir: o.dir, APIServerArgs: controlplane.WorkloadAPI,
		ControllerManagerArgs: controlplane.WorkloadAPI[:1], NodeLeases: true})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	client, err := c.Client()
	if err != nil {
		return err
	}
	rbac, err := os.ReadFile(o.schedulerRBAC)
	if err != nil {
		return err
	}
	step("applying " + o.schedulerRBAC + ": gpushare-scheduler's service account may do what kube-scheduler and its plugin need")
	kubeconfig, err := c.RoleKubeconfig(ctx, rbac, "kube-system", "gpushare-scheduler", daemonTokenTTL)
	if err != nil {
		return fmt.Errorf("%s: %w", o.schedulerRBAC, err)
	}
	step("starting gpushare-scheduler (profiles default-scheduler and gpu-scheduler; " + controlplane.WorkloadAPI[0] + ": PodGroups are placed whole) as that service account")
	if _, err := c.StartSchedulerAs(ctx, "gpushare-scheduler", o.scheduler, kubeconfig, config, controlplane.WorkloadAPI[0]); err != nil {
		return err
	}
	step("publishing its GPUShareArgs in ConfigMap kube-system/" + argsConfigMap + ", as the chart does: kubectl inspect gpushare reads the cluster's resource model there")
	if err := publishArgs(ctx, client, config); err != nil {
		return err
	}
	rbac, err = os.ReadFile(o.nodeRBAC)
	if err != nil {
		return err
	}
	step("applying " + o.nodeRBAC + ": each gpushare-node may change its own node's GPU inventory and nothing else")
	if err := controlplane.Apply(ctx, client, rbac); err != nil {
		return fmt.Errorf("%s: %w", o.nodeRBAC, err)
	}
	if o.allocationPolicy != "" {
		policy, err := os.ReadFile(o.allocationPolicy)
		if err != nil {
			return err
		}
		step("applying " + o.allocationPolicy + ": only gpushare's scheduler may write where a pod's GPUs are (" + gpusharev1.AllocationAnnotation + ")")
		if err := controlplane.ApplyAllocationPolicy(ctx, client, policy); err != nil {
			return fmt.Errorf("%s: %w", o.allocationPolicy, err)
		}
	}
	if o.hookPolicy != "" {
		policy, err := os.ReadFile(o.hookPolicy)
		if err != nil {
			return err
		}
		step("applying " + o.hookPolicy + ": each GPU container gets " + gpusharev1.HookResource + " devices, through which gpushare-node hands it its GPUs")
		if err := controlplane.ApplyHookPolicy(ctx, client, policy); err != nil {
			return fmt.Errorf("%s: %w", o.hookPolicy, err)
		}
	}
	step("creating simulated GPU nodes, each with a gpushare-node daemon on simulated GPUs")
	for _, n := range nodes {
		metrics, err := startDaemon(ctx, c, client, o, n)
		if err != nil {
			return err
		}
		mode := "shared"
		if n.WholeCard {
			mode = "whole cards only"
		}
		if n.MPS {
			mode += ", under MPS"
		}
		fmt.Printf("    %-14s %d x %s (%d MiB), %s; metrics at http://%s/metrics\n", n.Name, n.Count, n.Model, n.MemoryMiB, mode, metrics)
	}
	names := make([]string, 0, len(nodes)+1)
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	hasReal := false
	if o.realNode != "off" {
		if why := realNodeMissing(c, o); why != "" {
			if o.realNode == "on" {
				return fmt.Errorf("no real node: %s", why)
			}
			fmt.Printf("    (no real node %s: %s)\n", realNode.Name, why)
		} else {
			step("starting " + realNode.Name + ": a kubelet and containerd, with runc and the CNI bridge, that start its pods' containers (docs/real-node.md)")
			err := startRealNode(ctx, c, o, config)
			// Recorded even on error: make demo-down stops what started.
			if werr := writePIDs(c); werr != nil {
				return werr
			}
			switch {
			case err == nil:
				names = append(names, realNode.Name)
				hasReal = true
			case o.realNode == "on":
				return fmt.Errorf("the real node: %w", err)
			default:
				// StartRealNode undid what it did; the kwok nodes stay.
				fmt.Printf("    (no real node %s: %v)\n", realNode.Name, err)
			}
		}
	}
	if err := writePIDs(c); err != nil {
		return err
	}
	if err := waitInventories(ctx, client, names); err != nil {
		return err
	}
	if hasReal {
		// Before the examples, which may fill the node.
		tag, err := layoutTag(o.probeImage)
		if err != nil {
			return err
		}
		step("creating pod default/" + checkPod + " on " + realNode.Name + ": 4 GiB of a GPU, for its container to say what it sees")
		if err := createCheckPod(ctx, client, tag); err != nil {
			return err
		}
		if o.draDaemon != "" {
			step("creating ResourceClaim default/" + claimCheckPod + " (3 GiB of one of gpushare's DRA devices) and pod default/" + claimCheckPod + " that uses it")
			if err := createClaimCheckPod(ctx, client, tag); err != nil {
				return err
			}
		}
	}
	files, err := filepath.Glob(filepath.Join(o.examples, "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		step("applying " + f)
		if err := controlplane.Apply(ctx, client, b); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	step("waiting for the pods to be scheduled")
	pods, err := settle(ctx, client)
	if err != nil {
		return err
	}
	// The node daemons' pods are not the examples'.
	pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Namespace == metav1.NamespaceSystem })
	if err := printInspect(ctx, c.Kubeconfig, pods); err != nil {
		return err
	}
	if hasReal {
		if err := printRealPods(ctx, c, client); err != nil {
			return err
		}
	}
	if o.webhook != "" {
		if err := teams(ctx, c, client, o, config); err != nil {
			return err
		}
	}
	fmt.Printf("\nThe cluster keeps running. Try:\n    kubectl --kubeconfig %s get pods -A -o wide\n", c.Kubeconfig)
	fmt.Printf("    bin/kubectl-inspect-gpushare --kubeconfig %s -d\n", c.Kubeconfig)
	fmt.Printf("(kubectl %s is in %s)\nLogs are in %s. Stop it with: make demo-down\n",
		controlplane.KubeVersion, filepath.Dir(c.Tools.Bin("kubectl")), filepath.Join(o.dir, "logs"))
	return nil
}

func step(s string) { fmt.Printf("==> %s\n", s) }

// argsYAML returns the GPUShare args of the scheduler's configuration as
// the args file the chart gives gpushare-node.
func argsYAML(schedulerConfig []byte) ([]byte, error) {
	args, err := configv1.LoadArgsFrom(schedulerConfig)
	if err != nil {
		return nil, fmt.Errorf("the scheduler's configuration: %w", err)
	}
	return yaml.Marshal(args)
}

// argsConfigMap is the ConfigMap the demo publishes the scheduler's
// GPUShareArgs in, under the chart's label and key.
const argsConfigMap = "gpushare-args"

// publishArgs stores the GPUShare args of the scheduler's configuration
// in kube-system/gpushare-args, labelled and keyed as the chart's.
func publishArgs(ctx context.Context, client kubernetes.Interface, schedulerConfig []byte) error {
	raw, err := argsYAML(schedulerConfig)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: argsConfigMap, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"app.kubernetes.io/part-of": "gpushare"}},
		Data: map[string]string{"args.yaml": string(raw)},
	}
	if _, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ConfigMap kube-system/%s: %w", argsConfigMap, err)
	}
	return nil
}

// startDaemon creates node n without a GPU inventory and starts its
// gpushare-node on simulated GPUs, which publishes the inventory as it
// would on a real GPU node (kwok nodes have no kubelet: no device plugin),
// with the credentials it has there: a token bound to its pod on the node.
// It returns the daemon's metrics address.
func startDaemon(ctx context.Context, c *controlplane.Cluster, client kubernetes.Interface, o options, n controlplane.NodeSpec) (string, error) {
	n.Bare = true
	if err := controlplane.CreateNode(ctx, client, n); err != nil {
		return "", err
	}
	kubeconfig, err := c.NodeDaemonKubeconfig(ctx, n.Name, daemonTokenTTL)
	if err != nil {
		return "", err
	}
	gpus := filepath.Join(c.Dir, "gpus-"+n.Name+".yaml")
	if err := os.WriteFile(gpus, []byte(n.SimulatedGPUs()), 0o600); err != nil {
		return "", err
	}
	port, err := controlplane.FreePort()
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"--kubeconfig=" + kubeconfig, "--node-name=" + n.Name, "--simulated-gpus=" + gpus,
		"--no-device-plugin", "--metrics-bind-address=" + addr}
	if n.WholeCard {
		args = append(args, "--whole-card")
	}
	if n.MPS {
		// With no device plugin, --mps only marks the inventory.
		args = append(args, "--mps")
	}
	if _, err := c.Run("gpushare-node-"+n.Name, o.nodeDaemon, args...); err != nil {
		return "", err
	}
	return addr, nil
}

// daemonTokenTTL is how long the node daemons' tokens last: on a node the
// kubelet renews a pod's token, here nothing does.
const daemonTokenTTL = 7 * 24 * time.Hour

// waitInventories waits until every node named carries the inventory its
// daemon publishes.
func waitInventories(ctx context.Context, client kubernetes.Interface, names []string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		missing := 0
		for _, name := range names {
			node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || node.Annotations[gpusharev1.InventoryAnnotation] == "" {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d node daemon(s) did not publish a GPU inventory within a minute; see the logs", missing)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// settle waits until every pod is bound or has been found unschedulable,
// and the set of pods has stopped growing.
func settle(ctx context.Context, client kubernetes.Interface) ([]corev1.Pod, error) {
	deadline := time.Now().Add(90 * time.Second)
	var last int
	stable := 0
	for {
		list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		waiting := 0
		for _, p := range list.Items {
			if p.Spec.NodeName == "" && !unschedulable(&p) {
				waiting++
			}
		}
		if waiting == 0 && len(list.Items) == last && len(list.Items) > 0 {
			stable++
		} else {
			stable = 0
		}
		last = len(list.Items)
		if stable >= 5 || time.Now().After(deadline) {
			return list.Items, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

func writePIDs(c *controlplane.Cluster) error {
	var b strings.Builder
	for _, p := range c.Processes() {
		fmt.Fprintf(&b, "%d %s\n", p.Cmd.Process.Pid, p.Name)
	}
	return os.WriteFile(filepath.Join(c.Dir, pidFile), []byte(b.String()), 0o644)
}

func readPIDs(dir string) (map[int]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		pid, name, _ := strings.Cut(line, " ")
		n, err := strconv.Atoi(pid)
		if err == nil && n > 0 {
			out[n] = name
		}
	}
	return out, nil
}
