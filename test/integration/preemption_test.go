package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// gpuKey names one GPU of the cluster.
type gpuKey struct{ node, uuid string }

func (k gpuKey) String() string { return k.node + "/" + k.uuid }

// TestPreemption: on two nodes of two 16 GiB GPUs filled by low-priority
// pods of mixed sizes, a high-priority pod of 10 GiB fits no GPU. The
// cheapest eviction that frees 10 GiB on one GPU is the one 12 GiB pod
// of the GPU it shares with a 4 GiB pod (every other GPU needs two pods
// or more gone); kube-scheduler's DefaultPreemption left to itself would
// return pods oldest first and evict two. The victim is exactly that
// pod, the high-priority pod binds to its GPU with its record, no other
// pod is evicted, and no GPU is over-committed.
func TestPreemption(t *testing.T) {
	t.Parallel()
	_, client, _ := startPlugin(t, nil)
	ctx := context.Background()
	createNodes(t, client,
		controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 16384, Count: 2},
		controlplane.NodeSpec{Name: "gpu-b", Model: "Tesla T4", MemoryMiB: 16384, Count: 2})
	for name, value := range map[string]int32{"gpu-low": 100, "gpu-high": 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// One at a time, so that binpack fills each GPU before the next:
	// 12+4, 8+8, 4+4+4+4 and 6+6+4 GiB.
	sizes := []int64{12, 4, 8, 8, 4, 4, 4, 4, 6, 6, 4}
	before := map[string]types.UID{}
	gpuOf := map[string]gpuKey{}
	for i, gib := range sizes {
		name := fmt.Sprintf("low-%02d-%dg", i, gib)
		pod := gpuPod(name, gib*1024, 0)
		pod.Labels = map[string]string{"app": "low"}
		pod.Spec.PriorityClassName = "gpu-low"
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		bound := boundPod(t, client, "default", name)
		a := record(t, bound)
		if len(a.Containers) != 1 || len(a.Containers[0].GPUs) != 1 {
			t.Fatalf("pod %s recorded %s, want one GPU", name, describeAllocation(a))
		}
		before[name] = bound.UID
		gpuOf[name] = gpuKey{a.Node, a.Containers[0].GPUs[0].UUID}
	}
	byGPU := map[gpuKey][]string{}
	for name, g := range gpuOf {
		byGPU[g] = append(byGPU[g], name)
	}
	for _, g := range slices.SortedFunc(maps.Keys(byGPU), func(a, b gpuKey) int { return strings.Compare(a.String(), b.String()) }) {
		slices.Sort(byGPU[g])
		t.Logf("before: GPU %s holds %v", g, byGPU[g])
	}
	if len(byGPU) != 4 {
		t.Fatalf("low pods on %d GPUs, want all 4 filled", len(byGPU))
	}
	cheapest := gpuOf["low-00-12g"]
	if got := byGPU[cheapest]; !slices.Equal(got, []string{"low-00-12g", "low-01-4g"}) {
		t.Fatalf("GPU %s holds %v, want the 12 and 4 GiB pods", cheapest, got)
	}

	high := gpuPod("high", 10*1024, 0)
	high.Spec.PriorityClassName = "gpu-high"
	if _, err := client.CoreV1().Pods("default").Create(ctx, high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bound := boundPod(t, client, "default", "high")
	a := record(t, bound)
	if len(a.Containers) != 1 || len(a.Containers[0].GPUs) != 1 {
		t.Fatalf("pod high recorded %s, want one GPU", describeAllocation(a))
	}
	target := gpuKey{a.Node, a.Containers[0].GPUs[0].UUID}
	t.Logf("placement: pod high bound to GPU %s (%s)", target, describeAllocation(a))

	// The pods gone or going since the high-priority pod came.
	list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=low"})
	if err != nil {
		t.Fatal(err)
	}
	alive := map[string]bool{}
	for _, p := range list.Items {
		if p.UID == before[p.Name] && p.DeletionTimestamp == nil {
			alive[p.Name] = true
		}
	}
	var victims []string
	for name := range before {
		if !alive[name] {
			victims = append(victims, name)
		}
	}
	slices.Sort(victims)
	t.Logf("victims: %v", victims)
	for _, v := range victims {
		if gpuOf[v] != target {
			t.Errorf("victim %s was on GPU %s, not on GPU %s the pod bound to", v, gpuOf[v], target)
		}
	}
	if !slices.Equal(victims, []string{"low-00-12g"}) {
		t.Errorf("victims %v, want [low-00-12g]: the one pod whose eviction frees 10 GiB on a GPU", victims)
	}
	if target != cheapest {
		t.Errorf("pod high bound to GPU %s, want %s, which its victim freed", target, cheapest)
	}
	if len(alive) != len(before)-1 {
		t.Errorf("%d of %d low pods left, want all but one", len(alive), len(before))
	}
	if n, _ := checkNoOvercommit(t, client); n != len(alive)+1 {
		t.Errorf("%d pods hold GPUs, want %d (the low pods left and high)", n, len(alive)+1)
	}
	// kube-scheduler says so on the victim, and on no other pod.
	t.Logf("event on the victim: %s", eventNote(t, client, "default", "low-00-12g", "Preempted", "Preempted by"))
	evs, err := client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "Preempted" && e.Regarding.Name != "low-00-12g" {
			t.Errorf("pod %s was preempted too: %s", e.Regarding.Name, e.Note)
		}
	}
	// The victim is gone for good once kwok has let it terminate.
	err = waitFor(30*time.Second, func() (bool, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, "low-00-12g", metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Errorf("the victim was not deleted: %v", err)
	}
}
