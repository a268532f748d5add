package extender

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestBindRefusals: bind binds only a pod of one of its schedulers, not
// yet bound, onto a node the latest filter call for that pod passed;
// refusals book nothing and create no binding.
func TestBindRefusals(t *testing.T) {
	other := pod("other", 1024)
	other.Spec.SchedulerName = "other-scheduler"
	bound := pod("bound", 1024)
	bound.Spec.NodeName = "n2"
	cases := map[string]struct {
		pod *corev1.Pod
		// filter is the nodes filter is called with; nil: no call.
		filter []string
		node   string
		// want is part of the refusal; "" binds.
		want string
	}{
		"GPU pod onto the node filter passed":        {pod: pod("gpu", 1024), filter: []string{"n1"}, node: "n1"},
		"pod without GPUs onto a node filter passed": {pod: pod("plain", 0), filter: []string{"n1", "n2"}, node: "n2"},
		"GPU pod onto a node filter was not asked about": {pod: pod("gpu", 1024), filter: []string{"n1"}, node: "n2",
			want: "the latest filter call for pod default/gpu did not pass node n2"},
		"pod without GPUs onto a node filter was not asked about": {pod: pod("plain", 0), filter: []string{"n1"}, node: "n2",
			want: "did not pass node n2"},
		"GPU pod with no filter call": {pod: pod("gpu", 1024), node: "n1", want: "no recent filter call for pod default/gpu"},
		// 20000 MiB fits neither 16384 MiB GPU: filter passes nothing.
		"GPU pod that fits nowhere": {pod: pod("big", 20000), filter: []string{"n1", "n2"}, node: "n1", want: "no recent filter call"},
		"pod of another scheduler": {pod: other, filter: []string{"n1"}, node: "n1",
			want: `pod default/other has schedulerName "other-scheduler", not one of this extender's ["default-scheduler" "gpu-scheduler"]`},
		"pod already bound": {pod: bound, filter: []string{"n1"}, node: "n1", want: "already bound to n2"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ts := newTestServer(t, c.pod)
			if c.filter != nil {
				ts.filter(t, c.pod, c.filter...)
			}
			got := ts.bind(t, c.pod, c.node)
			switch {
			case c.want == "" && got != "":
				t.Fatalf("bind refused: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Fatalf("bind answered %q, want a refusal with %q", got, c.want)
			}
			wantNode := ""
			if c.want == "" {
				wantNode = c.node
			}
			if got := ts.boundTo(c.pod.Name); got != wantNode {
				t.Errorf("bound to %q, want %q", got, wantNode)
			}
			if p, _ := ts.Cache.Holding(c.pod.UID); c.want != "" && p != nil {
				t.Errorf("a refused bind booked %v", p)
			}
		})
	}
}

// TestBindFollowsTheLatestFilter: a later filter call for the same pod
// replaces what the earlier one passed, and a bind uses it up.
func TestBindFollowsTheLatestFilter(t *testing.T) {
	p := pod("gpu", 1024)
	ts := newTestServer(t, p)
	if got := ts.filter(t, p, "n1"); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("filter passed %v", got)
	}
	ts.filter(t, p, "n2")
	if got := ts.bind(t, p, "n1"); !strings.Contains(got, "did not pass node n1") {
		t.Fatalf("bind onto the earlier filter's node: %q", got)
	}
	if got := ts.bind(t, p, "n2"); got != "" {
		t.Fatalf("bind onto the latest filter's node: %q", got)
	}
	if n := ts.passed.size(); n != 0 {
		t.Errorf("%d pods remembered after the bind, want 0", n)
	}
}

// TestBindOtherUID: a filter call for another pod of the same name (an
// older UID) does not let bind place this one.
func TestBindOtherUID(t *testing.T) {
	p := pod("gpu", 1024)
	ts := newTestServer(t, p)
	old := p.DeepCopy()
	old.UID = "uid-older"
	ts.filter(t, old, "n1")
	if got := ts.bind(t, p, "n1"); !strings.Contains(got, "no recent filter call") {
		t.Fatalf("bind answered %q, want a refusal", got)
	}
}
