package inspect

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKeptWaiting: the table names the pods that wait while idle GPUs are
// kept for whole-GPU pods (their PodScheduled condition counts nodes that
// kept them), and no pod that waits for another reason, is bound or is
// being deleted.
func TestKeptWaiting(t *testing.T) {
	waiting := func(name, message string) corev1.Pod {
		p := pod("team", name).app("main", "4096", "").obj()
		p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message}}}
		return *p
	}
	const kept = "0/3 nodes are available: 2 GPUKeptSpare, 1 InsufficientGPUMemory. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
	pods := []corev1.Pod{
		waiting("kept-b", kept),
		waiting("kept-a", kept),
		waiting("short", "0/3 nodes are available: 3 InsufficientGPUMemory."),
		waiting("deleted", kept),
		waiting("bound", kept),
	}
	pods[3].DeletionTimestamp = &metav1.Time{Time: now}
	pods[4].Spec.NodeName = "a"
	c := Build(Input{Pods: pods, Now: now})
	if want := []string{"team/kept-a", "team/kept-b"}; !slices.Equal(c.KeptWaiting, want) {
		t.Fatalf("kept waiting %v, want %v", c.KeptWaiting, want)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, c, TableOptions{Unit: GiB}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Pods waiting while idle GPUs are kept for the whole-GPU pods expected (GPUKeptSpare") ||
		!strings.Contains(b.String(), "  team/kept-a\n  team/kept-b\n") {
		t.Errorf("table:\n%s\nwant the two kept pods listed", b.String())
	}

	// Past ten, the rest are counted.
	pods = pods[:0]
	for i := range 13 {
		pods = append(pods, waiting(fmt.Sprintf("p%02d", i), kept))
	}
	b.Reset()
	if err := WriteTable(&b, Build(Input{Pods: pods, Now: now}), TableOptions{Unit: GiB}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "  team/p09\n  and 3 more\n") || strings.Contains(out, "team/p10") {
		t.Errorf("table:\n%s\nwant ten pods listed and 3 more counted", out)
	}
}
