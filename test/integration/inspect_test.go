package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/cmd/kubectl-inspect-gpushare/app"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/inspect"
)

// TestInspectSeeds schedules the seed examples and checks that `kubectl
// inspect gpushare` books on every GPU what the pods' records book,
// summed here from the records by Kubernetes' rule for init containers.
func TestInspectSeeds(t *testing.T) {
	t.Parallel()
	c, client, _ := startPlugin(t, nil)
	checkSeeds(t, client)
	// A pod that ends between the two reads (the KETI Job's) changes
	// the bookings: read the records before and after the tool until
	// they agree.
	var view inspect.Cluster
	var want map[string]usage
	var wantTotal int64
	for try := 0; ; try++ {
		before, _ := bookedFromRecords(t, client)
		view = inspect.Cluster{}
		if err := json.Unmarshal(inspectCmd(t, c.Kubeconfig, "-o", "json"), &view); err != nil {
			t.Fatal(err)
		}
		want, wantTotal = bookedFromRecords(t, client)
		if maps.Equal(before, want) || try == 2 {
			break
		}
	}
	if len(view.Refused) > 0 {
		t.Errorf("the tool refuses records the scheduler wrote: %+v", view.Refused)
	}
	got := map[string]usage{}
	var nodes int
	for _, n := range view.Nodes {
		if n.Error != "" {
			t.Errorf("node %s left out: %s", n.Name, n.Error)
		}
		nodes++
		for _, g := range n.GPUs {
			if g.BookedMemoryMiB != 0 || g.BookedCompute != 0 {
				got[g.UUID] = usage{g.BookedMemoryMiB, g.BookedCompute}
			}
		}
	}
	if nodes != len(seedNodes) {
		t.Errorf("the tool shows %d nodes, want %d", nodes, len(seedNodes))
	}
	for uuid, w := range want {
		if got[uuid] != w {
			t.Errorf("GPU %s: the tool shows %+v booked, the records book %+v", uuid, got[uuid], w)
		}
	}
	for uuid, g := range got {
		if _, ok := want[uuid]; !ok {
			t.Errorf("GPU %s: the tool shows %+v booked, no record books it", uuid, g)
		}
	}
	if view.AllocatedMiB != wantTotal {
		t.Errorf("the tool's cluster total is %d MiB, the records book %d", view.AllocatedMiB, wantTotal)
	}

	// With the scheduler's resource model (deploy/scheduler-config.yaml's
	// GPUShareArgs) every record is checked against its pod's spec as
	// the scheduler checks it, and still books.
	config := filepath.Join(t.TempDir(), "args.yaml")
	args := "apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nnodePolicy: binpack\nresourceModel:\n" +
		"  unitOverrides:\n  - {name: aliyun.com/gpu-mem, unit: MiB, namespaces: [team-mib]}\n"
	if err := os.WriteFile(config, []byte(args), 0o644); err != nil {
		t.Fatal(err)
	}
	var checked inspect.Cluster
	if err := json.Unmarshal(inspectCmd(t, c.Kubeconfig, "-o", "json", "--config", config), &checked); err != nil {
		t.Fatal(err)
	}
	if len(checked.Refused) > 0 || checked.AllocatedMiB != view.AllocatedMiB {
		t.Errorf("with --config: %d MiB booked, refused %+v; want %d MiB, none refused", checked.AllocatedMiB, checked.Refused, view.AllocatedMiB)
	}

	// The views render from the same numbers.
	table := string(inspectCmd(t, c.Kubeconfig, "--unit", "MiB"))
	if !strings.Contains(table, "Allocated/Total GPU Memory In Cluster:") || !strings.Contains(table, strconv.FormatInt(wantTotal, 10)+"/") {
		t.Errorf("table lacks the cluster total %d MiB:\n%s", wantTotal, table)
	}
	details := string(inspectCmd(t, c.Kubeconfig, "-d"))
	for _, s := range []string{"default/multi-container (warm-cache, init)", "default/multi-container (tokenizer)", "MODE:         WholeCard", "ENFORCEMENT:  none: shares are booked, not enforced"} {
		if !strings.Contains(details, s) {
			t.Errorf("-d lacks %q:\n%s", s, details)
		}
	}
	pod := string(inspectCmd(t, c.Kubeconfig, "pod", "-n", "default", "multi-container"))
	for _, s := range []string{"warm-cache  Init", "server      App", "tokenizer   App"} {
		if !strings.Contains(pod, s) {
			t.Errorf("pod view lacks %q:\n%s", s, pod)
		}
	}
}

type usage struct{ mib, compute int64 }

// bookedFromRecords sums each GPU's bookings from the records of the pods
// that have not ended: app containers and sidecars together, each init
// container alone beside the sidecars declared before it, the largest of
// these phases. It returns them by GPU UUID, with the total memory.
func bookedFromRecords(t *testing.T, client kubernetes.Interface) (map[string]usage, int64) {
	t.Helper()
	pods, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]usage{}
	var total int64
	for i := range pods.Items {
		p := &pods.Items[i]
		if _, ok := p.Annotations[gpusharev1.AllocationAnnotation]; !ok || gpucache.Ended(p) {
			continue
		}
		a := record(t, p)
		sidecars, apps, inits := map[string]usage{}, map[string]usage{}, map[string]usage{}
		for _, c := range a.Containers {
			for _, g := range c.GPUs {
				u := usage{g.MemoryMiB, g.Compute}
				switch c.Kind {
				case gpusharev1.ContainerInit:
					s := sidecars[g.UUID]
					inits[g.UUID] = usage{max(inits[g.UUID].mib, s.mib+u.mib), max(inits[g.UUID].compute, s.compute+u.compute)}
				case gpusharev1.ContainerSidecar:
					sidecars[g.UUID] = usage{sidecars[g.UUID].mib + u.mib, sidecars[g.UUID].compute + u.compute}
				default:
					apps[g.UUID] = usage{apps[g.UUID].mib + u.mib, apps[g.UUID].compute + u.compute}
				}
			}
		}
		for uuid := range union(sidecars, apps, inits) {
			run := usage{sidecars[uuid].mib + apps[uuid].mib, sidecars[uuid].compute + apps[uuid].compute}
			b := usage{max(run.mib, inits[uuid].mib), max(run.compute, inits[uuid].compute)}
			out[uuid] = usage{out[uuid].mib + b.mib, out[uuid].compute + b.compute}
			total += b.mib
		}
	}
	return out, total
}

func union(ms ...map[string]usage) map[string]bool {
	keys := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			keys[k] = true
		}
	}
	return keys
}

// inspectCmd runs `kubectl inspect gpushare` in-process with args and
// returns what it wrote.
func inspectCmd(t testing.TB, kubeconfig string, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := app.NewCmd(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("kubectl inspect gpushare %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.Bytes()
}
