package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/inspect"
)

// TestInspectTellsTheTruth: `kubectl inspect gpushare` as an operator
// runs it. It reads the resource model the cluster runs from the chart's
// args ConfigMap (a pod in a MiB namespace is read in MiB, without
// --config), or from gpushare-scheduler's own configuration file; it
// shows a GPU that records over-commit above its capacity; a pending
// pod's "Closest" names only nodes its nodeSelector allows; and with -l,
// pods on nodes left out are left out, not called "not a gpushare node".
func TestInspectTellsTheTruth(t *testing.T) {
	t.Parallel()
	c, client, _ := startPlugin(t, nil)
	ctx := context.Background()
	createNodes(t, client,
		controlplane.NodeSpec{Name: "t4-a", Model: "Tesla T4", MemoryMiB: 15360, Count: 1},
		controlplane.NodeSpec{Name: "t4-b", Model: "Tesla T4", MemoryMiB: 15360, Count: 1})
	label(t, client, "t4-a", "pool", "a")
	label(t, client, "t4-b", "pool", "b")
	for _, ns := range []string{"team-mib", "gpushare-system"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A pod of the MiB namespace, placed by the scheduler on t4-a.
	mib := aliyunPod("team-mib", "mib", 3500)
	mib.Spec.NodeSelector = map[string]string{"pool": "a"}
	if _, err := client.CoreV1().Pods("team-mib").Create(ctx, mib, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	boundPod(t, client, "team-mib", "mib")
	asks := "main (app): 3500 MiB,"
	// The chart's args ConfigMap (its label and key).
	args := "apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nresourceModel:\n" +
		"  unitOverrides:\n  - {name: aliyun.com/gpu-mem, unit: MiB, namespaces: [team-mib]}\n"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gpushare-args", Namespace: "gpushare-system",
		Labels: map[string]string{"app.kubernetes.io/part-of": "gpushare"}}, Data: map[string]string{"args.yaml": args}}
	if _, err := client.CoreV1().ConfigMaps("gpushare-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if view := string(inspectCmd(t, c.Kubeconfig, "pod", "-n", "team-mib", "mib")); !strings.Contains(view, asks) || strings.Contains(view, "unreadable") {
		t.Errorf("with the cluster's args ConfigMap the pod view should read %q:\n%s", asks, view)
	}
	if view := string(inspectCmd(t, c.Kubeconfig, "pod", "-n", "team-mib", "mib", "--config", root+"/deploy/scheduler-config.yaml")); !strings.Contains(view, asks) {
		t.Errorf("with --config of gpushare-scheduler's configuration the pod view should read %q:\n%s", asks, view)
	}

	// Two records on t4-b's GPU of 10240 MiB each (written without the
	// allocation policy): the GPU shows 20480 MiB booked of 15360.
	for _, name := range []string{"over-1", "over-2"} {
		p := gpuPod(name, 10240, 0)
		p.Spec.NodeName = "t4-b"
		p.Annotations = map[string]string{gpusharev1.AllocationAnnotation: `{"apiVersion":"gpushare.io/v1alpha1","kind":"Allocation","node":"t4-b",` +
			`"containers":[{"name":"main","kind":"App","gpus":[{"index":0,"uuid":"GPU-t4-b-0","memoryMiB":10240,"compute":0}]}]}`}
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var view inspect.Cluster
	if err := json.Unmarshal(inspectCmd(t, c.Kubeconfig, "-o", "json"), &view); err != nil {
		t.Fatal(err)
	}
	for _, n := range view.Nodes {
		if n.Name == "t4-b" && (len(n.GPUs) != 1 || n.GPUs[0].BookedMemoryMiB != 20480) {
			t.Errorf("t4-b's GPU shows %+v, want 20480 MiB booked of 15360", n.GPUs)
		}
	}
	details := string(inspectCmd(t, c.Kubeconfig, "-d", "--unit", "MiB", "-l", "pool=b"))
	if !strings.Contains(details, "20480/15360") {
		t.Errorf("-d shows the over-committed GPU below its capacity:\n%s", details)
	}
	// -l pool=b: the pod on t4-a is not "refused".
	if strings.Contains(details, "not a gpushare node") || strings.Contains(details, "team-mib/mib") {
		t.Errorf("-l pool=b speaks of the pod on t4-a:\n%s", details)
	}

	// A pending pod that may land on pool=a only (t4-a has 11860 MiB
	// free, it asks 15000): Closest names t4-a alone, not t4-b.
	waiting := gpuPod("waiting", 15000, 0)
	waiting.Spec.NodeSelector = map[string]string{"pool": "a"}
	if _, err := client.CoreV1().Pods("default").Create(ctx, waiting, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedSchedulingMessage(t, client, "default", "waiting", "")
	var pv inspect.PodView
	if err := json.Unmarshal(inspectCmd(t, c.Kubeconfig, "pod", "waiting", "-o", "json"), &pv); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(pv.Closest); len(pv.Closest) != 1 || pv.Closest[0].Node != "t4-a" {
		t.Errorf("Closest %s, want t4-a alone (the pod's nodeSelector excludes t4-b)", got)
	}
}

// label sets a label on node.
func label(t *testing.T, client kubernetes.Interface, node, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if _, err := client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
