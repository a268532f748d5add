package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/inspect"
)

// createGang creates a PodGroup that schedules n pods together and its n
// pods, each asking mib MiB of one GPU.
func createGang(t *testing.T, admin kubernetes.Interface, name string, n int, mib int64) {
	t.Helper()
	ctx := context.Background()
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(n)}}}}
	if _, err := admin.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := gpuPod(fmt.Sprintf("%s-%d", name, i), mib, 0)
		p.Labels = map[string]string{"gang": name}
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
		if _, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// gangBound returns how many of the gang's pods are bound.
func gangBound(t *testing.T, admin kubernetes.Interface, name string) int {
	t.Helper()
	list, err := admin.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "gang=" + name})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// waitGangUnschedulable waits until the PodGroup says it could not be
// placed and returns its message.
func waitGangUnschedulable(t *testing.T, admin kubernetes.Interface, name string) string {
	t.Helper()
	var msg string
	if err := waitFor(60*time.Second, func() (bool, error) {
		pg, err := admin.SchedulingV1beta1().PodGroups("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c := apimeta.FindStatusCondition(pg.Status.Conditions, "PodGroupInitiallyScheduled")
		if c != nil && c.Status == metav1.ConditionFalse && c.Reason == "Unschedulable" {
			msg = c.Message
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("PodGroup %s never said it could not be placed", name)
	}
	return msg
}

// deleteGang deletes the gang's pods at once.
func deleteGang(t *testing.T, admin kubernetes.Interface, name string) {
	t.Helper()
	if err := admin.CoreV1().Pods("default").DeleteCollection(context.Background(),
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{LabelSelector: "gang=" + name}); err != nil {
		t.Fatal(err)
	}
}

// TestGang: 1.37's PodGroups of shared-GPU pods through gpushare-scheduler
// with the GenericWorkload gate. On one node with two 16 GiB T4s (four
// 8 GiB shares):
//   - a gang of four 8 GiB pods binds wholly, two to a GPU;
//   - a gang of three that does not fit stays wholly Pending, its
//     PodGroup and pods saying why, and holds no GPU while it waits: a
//     lone 8 GiB pod created after it binds in the room it left;
//   - when the first gang goes, the waiting one binds wholly;
//   - two gangs of three created together, where one fits at a time,
//     both finish: one binds, and the other once the first is gone.
//
// A watcher checks every second that no GPU is over-committed.
func TestGang(t *testing.T) {
	c, admin, _ := startPluginWith(t, controlplane.Options{APIServerArgs: controlplane.WorkloadAPI, ControllerManagerArgs: controlplane.WorkloadAPI[:1]},
		nil, controlplane.WorkloadAPI[0])
	createNodes(t, admin, controlplane.NodeSpec{Name: "gpu-a", Model: "Tesla T4", MemoryMiB: 16384, Count: 2})
	checked := watchRecords(t, c)

	createGang(t, admin, "four", 4, 8192)
	pods := boundPods(t, admin, "default", "gang=four", 4)
	perGPU := map[int]int{}
	for i := range pods {
		a := record(t, &pods[i])
		perGPU[a.Containers[0].GPUs[0].Index]++
	}
	if perGPU[0] != 2 || perGPU[1] != 2 {
		t.Errorf("gang four by GPU %v, want two pods on each", perGPU)
	}

	// Three more 8 GiB shares: no room while four runs.
	createGang(t, admin, "three", 3, 8192)
	msg := waitGangUnschedulable(t, admin, "three")
	t.Logf("PodGroup three: %s", msg)
	if !strings.Contains(msg, "minCount (3) cannot be satisfied") {
		t.Errorf("PodGroup three's condition %q does not say the gang cannot be placed whole", msg)
	}
	// Each pod has a FailedScheduling event: the pod the group's cycle
	// stopped at names the GPU resource that is short, the others the
	// group's count.
	short := 0
	for i := range 3 {
		note := failedSchedulingMessage(t, admin, "default", fmt.Sprintf("three-%d", i), "")
		t.Logf("pod three-%d: %s", i, note)
		if strings.Contains(note, "InsufficientGPUMemory") {
			short++
		}
	}
	if short == 0 {
		t.Error("no pod of gang three says it is the GPU memory that is short")
	}
	if n := gangBound(t, admin, "three"); n != 0 {
		t.Fatalf("%d of gang three's pods bound with no room for all", n)
	}
	// kubectl inspect gpushare gangs reads it the same way.
	var gangs []inspect.Gang
	if err := json.Unmarshal(inspectCmd(t, c.Kubeconfig, "gangs", "-o", "json"), &gangs); err != nil {
		t.Fatal(err)
	}
	verdicts := map[string]string{}
	for _, g := range gangs {
		verdicts[g.Name] = g.Verdict + ": " + g.Why
	}
	if want := inspect.GangWaits + ": 0 of the 3 pod(s) it needs fit the GPUs as they are; none binds until all do"; verdicts["default/three"] != want {
		t.Errorf("inspect gangs says of three %q, want %q", verdicts["default/three"], want)
	}
	if verdicts["default/four"] != inspect.GangPlaced+": " {
		t.Errorf("inspect gangs says of four %q, want placed", verdicts["default/four"])
	}

	// One pod of four goes; a lone pod takes its room: the waiting gang
	// (which could place one of its three there) holds nothing.
	if err := admin.CoreV1().Pods("default").Delete(context.Background(), "four-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	lone := gpuPod("lone", 8192, 0)
	if _, err := admin.CoreV1().Pods("default").Create(context.Background(), lone, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	boundPod(t, admin, "default", "lone")
	if n := gangBound(t, admin, "three"); n != 0 {
		t.Fatalf("%d of gang three's pods bound with room for one", n)
	}

	// The rest of four and the lone pod go: three binds wholly.
	deleteGang(t, admin, "four")
	if err := admin.CoreV1().Pods("default").Delete(context.Background(), "lone", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	boundPods(t, admin, "default", "gang=three", 3)
	t.Logf("gang three bound %v after the room appeared", time.Since(start).Round(time.Millisecond))
	deleteGang(t, admin, "three")
	// A PodGroup whose pods are gone can be deleted: the API server's
	// finalizer is removed by kube-controller-manager, whose gate the
	// demo and install.md turn on with the API server's.
	for _, name := range []string{"four", "three"} {
		if err := admin.SchedulingV1beta1().PodGroups("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(60*time.Second, func() (bool, error) {
			_, err := admin.SchedulingV1beta1().PodGroups("default").Get(context.Background(), name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Errorf("PodGroup %s still there a minute after its deletion, its pods gone: its finalizer is never removed", name)
		}
	}

	// Two gangs of three, created together; room for one at a time.
	if err := waitFor(30*time.Second, func() (bool, error) {
		n, _ := checkNoOvercommit(t, admin)
		return n == 0, nil
	}); err != nil {
		t.Fatal("gang three's pods never went")
	}
	createGang(t, admin, "red", 3, 8192)
	createGang(t, admin, "blue", 3, 8192)
	var first, second string
	if err := waitFor(60*time.Second, func() (bool, error) {
		r, b := gangBound(t, admin, "red"), gangBound(t, admin, "blue")
		if r != 0 && b != 0 {
			return false, fmt.Errorf("both gangs hold GPUs: red %d, blue %d", r, b)
		}
		switch {
		case r == 3:
			first, second = "red", "blue"
		case b == 3:
			first, second = "blue", "red"
		}
		return first != "", nil
	}); err != nil {
		t.Fatalf("two gangs of three: %v", err)
	}
	waitGangUnschedulable(t, admin, second)
	if n := gangBound(t, admin, second); n != 0 {
		t.Fatalf("%d of gang %s's pods bound beside gang %s", n, second, first)
	}
	deleteGang(t, admin, first)
	boundPods(t, admin, "default", "gang="+second, 3)
	if n, mib := checkNoOvercommit(t, admin); n != 3 || mib != 3*8192 {
		t.Errorf("%d pods book %d MiB, want gang %s's 3 and %d", n, mib, second, 3*8192)
	}
	checked()
}
