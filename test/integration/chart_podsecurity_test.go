package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// podSecurityLevels are the Pod Security Standards, least privileged
// first.
var podSecurityLevels = []string{"restricted", "baseline", "privileged"}

// TestChartPodSecurity: each component's pods need the Pod Security level
// docs/install.md gives it, and no more (kube-apiserver's PodSecurity
// admission, server-side dry runs in namespaces enforcing each level);
// installed in a namespace that enforces baseline, the node daemons' pods
// are refused and gpushare-scheduler's admitted, and with the label the
// guide says (enforce=privileged) the DaemonSet creates its pods.
func TestChartPodSecurity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}

	// The level docs/install.md gives each component's pods.
	levels := []struct {
		name, workload string
		set            []string
		level          string
	}{
		{"gpushare-scheduler", "gpushare-scheduler", nil, "restricted"},
		{"gpushare-extender beside kube-scheduler", "gpushare-extender", []string{"mode=extender"}, "privileged"},
		{"gpushare-extender behind a Service", "gpushare-extender", []string{"mode=extender", "extender.beside=false"}, "restricted"},
		{"gpushare-node", "gpushare-node", nil, "privileged"},
		{"gpushare-node with MPS", "gpushare-node", []string{"node.mps=true"}, "privileged"},
	}
	for _, level := range podSecurityLevels {
		ns := "psa-" + level
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, sa := range []string{"gpushare-scheduler", "gpushare-extender", "gpushare-node"} {
			if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, l := range levels {
		var spec *corev1.PodSpec
		for _, obj := range render(t, chartNamespace, l.set...) {
			switch o := obj.(type) {
			case *appsv1.Deployment:
				if o.Name == l.workload {
					spec = &o.Spec.Template.Spec
				}
			case *appsv1.DaemonSet:
				if o.Name == l.workload {
					spec = &o.Spec.Template.Spec
				}
			}
		}
		if spec == nil {
			t.Fatalf("%s: the chart rendered no %s", l.name, l.workload)
		}
		// Cluster-critical classes need a quota outside kube-system (the
		// chart's own); Pod Security does not look at them.
		spec.PriorityClassName = ""
		need := slices.Index(podSecurityLevels, l.level)
		for i, level := range podSecurityLevels {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "psa-", Namespace: "psa-" + level}, Spec: *spec}
			_, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			refused := err != nil && strings.Contains(err.Error(), "violates PodSecurity")
			if err != nil && !refused {
				t.Fatalf("%s in %s: %v", l.name, pod.Namespace, err)
			}
			if refused != (i < need) {
				t.Errorf("%s under Pod Security %s: refused %v (%v); docs/install.md says it needs %s", l.name, level, refused, err, l.level)
			}
		}
	}

	// The chart in a namespace that enforces baseline.
	bare := []controlplane.NodeSpec{}
	for _, s := range seedNodes[:2] {
		s.Bare = true
		bare = append(bare, s)
	}
	createNodes(t, client, bare...)
	for _, s := range bare {
		patch := []byte(`{"metadata":{"labels":{"gpushare":"true"}}}`)
		if _, err := client.CoreV1().Nodes().Patch(ctx, s.Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	helm(t, "install", "gpushare", chart, "--kubeconfig", c.Kubeconfig, "--namespace", chartNamespace)
	eventNote(t, client, chartNamespace, "gpushare-node", "FailedCreate", `violates PodSecurity "baseline:latest": hostPath volumes`)
	count := func(selector string) int {
		t.Helper()
		pods, err := client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		return len(pods.Items)
	}
	if n := count("app.kubernetes.io/component=node"); n != 0 {
		t.Errorf("%d gpushare-node pods under baseline; want none", n)
	}
	if err := waitFor(time.Minute, func() (bool, error) { return count("app.kubernetes.io/name=gpushare-scheduler") == 2, nil }); err != nil {
		t.Errorf("gpushare-scheduler's pods under baseline: %d; want 2 (they meet restricted)", count("app.kubernetes.io/name=gpushare-scheduler"))
	}
	// The guide's label, on the chart's namespace.
	label := docBlock(t, "docs/install.md", "### Pod Security")
	if len(label) != 1 || !strings.Contains(label[0], "pod-security.kubernetes.io/enforce=privileged") {
		t.Fatalf("docs/install.md's Pod Security block is %q; want the one label command", label)
	}
	runDoc(t, c, label[0])
	if err := waitFor(2*time.Minute, func() (bool, error) { return count("app.kubernetes.io/component=node") == len(bare), nil }); err != nil {
		t.Fatalf("with enforce=privileged, %d gpushare-node pods; want %d: %v", count("app.kubernetes.io/component=node"), len(bare), err)
	}
}
