package extender

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/decision"
)

// call posts body, JSON-encoded, to verb and decodes the answer into out.
func (ts *testServer) call(t *testing.T, verb string, body, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	w := ts.post(verb, b)
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), out) != nil {
		t.Fatalf("%s: %d %s", verb, w.Code, w.Body)
	}
}

// TestFilterAnswers: filter fails the nodes the pod does not fit with the
// core's reason and the cluster-wide numbers (for good where no eviction
// could make room), nodes outside gpushare for good, every node for good
// for a malformed request, and passes every node for a pod without GPUs;
// the answer takes the form of the call.
func TestFilterAnswers(t *testing.T) {
	names := []string{"n1", "n2", "n9"}
	outside := map[string]string{"n9": decision.ReasonNotGPUShareNode}
	bad := pod("bad", 0)
	bad.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-core": *k8sresource.NewQuantity(150, k8sresource.DecimalSI)}
	const short = "GPUTooSmall (gpushare: largest free share on any GPU is 16384 MiB, pod needs 20000 MiB)"
	const full = "InsufficientGPUMemory (gpushare: largest free share on any GPU is 15360 MiB, pod needs 16384 MiB)"
	const malformed = `container "main": gpushare.io/gpu-core: 150 is above 100`
	gang := pod("gang-0", 1024)
	gang.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("gang")}
	plainGang := pod("plain-gang-0", 0)
	plainGang.Spec.SchedulingGroup = gang.Spec.SchedulingGroup
	for name, c := range map[string]struct {
		pod                     *corev1.Pod
		passed                  []string
		failed, unresolvable    map[string]string
		unresolvablePrefixOnAll string
	}{
		// BestOnly: a pod without soft preferences goes on to the best
		// alone: n1, whose GPU is in use, rather than n2's idle one.
		"fits": {pod: pod("small", 1024), passed: []string{"n1"}, failed: map[string]string{}, unresolvable: outside},
		"fits nowhere": {pod: pod("big", 20000), passed: []string{}, failed: map[string]string{},
			unresolvable: map[string]string{"n1": short, "n2": short, "n9": decision.ReasonNotGPUShareNode}},
		"full":      {pod: pod("full", 16384), passed: []string{"n2"}, failed: map[string]string{"n1": full}, unresolvable: outside},
		"no GPUs":   {pod: pod("plain", 0), passed: names, failed: map[string]string{}, unresolvable: map[string]string{}},
		"malformed": {pod: bad, passed: []string{}, failed: map[string]string{}, unresolvablePrefixOnAll: malformed},
		// A PodGroup's GPU pod is refused everywhere, saying who places
		// it; one without GPUs passes as any such pod.
		"gang":       {pod: gang, passed: []string{}, failed: map[string]string{}, unresolvablePrefixOnAll: decision.ReasonGangInExtender},
		"plain gang": {pod: plainGang, passed: names, failed: map[string]string{}, unresolvable: map[string]string{}},
	} {
		t.Run(name, func(t *testing.T) {
			ts := newTestServer(t)
			if err := ts.Cache.Assume("busy", "default/busy", &alloc.Placement{Node: "n1",
				Booked: []alloc.Assignment{{GPU: 0, UUID: "GPU-n1-0", Usage: alloc.Usage{MemoryMiB: 1024}}}}); err != nil {
				t.Fatal(err)
			}
			var res extenderv1.ExtenderFilterResult
			ts.call(t, "filter", map[string]any{"pod": c.pod, "nodenames": names}, &res)
			if res.NodeNames == nil || !slices.Equal(*res.NodeNames, c.passed) {
				t.Errorf("passed %v, want %v", res.NodeNames, c.passed)
			}
			if !equalMaps(res.FailedNodes, c.failed) {
				t.Errorf("failed %v, want %v", res.FailedNodes, c.failed)
			}
			if c.unresolvablePrefixOnAll != "" {
				for _, n := range names {
					if !strings.HasPrefix(res.FailedAndUnresolvableNodes[n], c.unresolvablePrefixOnAll) {
						t.Errorf("node %s failed for good with %q, want %q", n, res.FailedAndUnresolvableNodes[n], c.unresolvablePrefixOnAll)
					}
				}
			} else if !equalMaps(res.FailedAndUnresolvableNodes, c.unresolvable) {
				t.Errorf("failed for good %v, want %v", res.FailedAndUnresolvableNodes, c.unresolvable)
			}
		})
	}
	t.Run("Node objects", func(t *testing.T) {
		ts := newTestServer(t)
		var res extenderv1.ExtenderFilterResult
		nodes := corev1.NodeList{}
		for _, n := range names {
			nodes.Items = append(nodes.Items, corev1.Node{})
			nodes.Items[len(nodes.Items)-1].Name = n
		}
		ts.call(t, "filter", map[string]any{"pod": pod("plain", 0), "nodes": nodes}, &res)
		if res.NodeNames != nil || res.Nodes == nil || len(res.Nodes.Items) != len(names) {
			t.Errorf("answer %+v, want the %d Node objects back", res, len(names))
		}
	})
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestPrioritize: the node policy's best node gets the top score and the
// other 0, whether prioritize reuses the filter call's ratings or rates
// the nodes itself; a pod without GPUs gets 0 everywhere.
func TestPrioritize(t *testing.T) {
	// binpack: n1, with 8 GiB taken, is best for the next pod.
	held := pod("held", 8192)
	small := pod("small", 1024)
	for _, afterFilter := range []bool{false, true} {
		ts := newTestServer(t, held, small)
		ts.filter(t, held, "n1")
		if got := ts.bind(t, held, "n1"); got != "" {
			t.Fatalf("bind: %s", got)
		}
		if afterFilter {
			ts.filter(t, small, "n1", "n2")
		}
		var got extenderv1.HostPriorityList
		ts.call(t, "prioritize", map[string]any{"pod": small, "nodenames": []string{"n1", "n2"}}, &got)
		want := extenderv1.HostPriorityList{{Host: "n1", Score: extenderv1.MaxExtenderPriority}, {Host: "n2", Score: 0}}
		if !slices.Equal(got, want) {
			t.Errorf("after filter %v: %v, want %v", afterFilter, got, want)
		}
		ts.call(t, "prioritize", map[string]any{"pod": pod("plain", 0), "nodenames": []string{"n1", "n2"}}, &got)
		if want := (extenderv1.HostPriorityList{{Host: "n1"}, {Host: "n2"}}); !slices.Equal(got, want) {
			t.Errorf("pod without GPUs: %v, want %v", got, want)
		}
	}
}

// TestHostileCalls: calls kube-scheduler would never make get 400 with
// what is wrong, and book nothing.
func TestHostileCalls(t *testing.T) {
	for name, c := range map[string]struct{ verb, body, want string }{
		"filter without a pod":           {"filter", `{"nodenames":["n1"]}`, "request has no pod"},
		"filter without nodes":           {"filter", `{"pod":{"metadata":{"name":"p"}}}`, "neither nodes nor nodeNames"},
		"filter with null pod":           {"filter", `{"pod":null,"nodenames":["n1"]}`, "request has no pod"},
		"prioritize of the wrong shape":  {"prioritize", `[1,2,3]`, "malformed request"},
		"prioritize with nodes a string": {"prioritize", `{"pod":{},"nodenames":"n1"}`, "malformed request"},
		"bind of the wrong shape":        {"bind", `{"podName":7}`, "malformed request"},
		"bind without a namespace":       {"bind", `{"podName":"p","node":"n1"}`, "bind needs"},
		"bind, not JSON":                 {"bind", `podName=p&node=n1`, "malformed JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			ts := newTestServer(t, pod("p", 1024))
			w := ts.post(c.verb, []byte(c.body))
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), c.want) {
				t.Errorf("%d %q, want 400 with %q", w.Code, w.Body, c.want)
			}
			if p, _ := ts.Cache.Holding("uid-p"); p != nil || ts.boundTo("p") != "" {
				t.Errorf("a hostile call booked %v or bound the pod to %q", p, ts.boundTo("p"))
			}
		})
	}
}

// TestFilterKeepsTheBest: with MaxNodes 2 and BestOnly off, filter
// passes the two nodes whose GPUs are already in use over the idle ones,
// in the order kube-scheduler named them, a name given twice once; with
// BestOnly, one of those two alone.
func TestFilterKeepsTheBest(t *testing.T) {
	for _, bestOnly := range []bool{false, true} {
		ts := newTestServer(t)
		ts.MaxNodes, ts.BestOnly = 2, bestOnly
		for _, name := range []string{"n3", "n4"} {
			n, err := controlplane.NodeSpec{Name: name, Model: "NVIDIA GPU", MemoryMiB: 16384, Count: 1}.Node()
			if err != nil {
				t.Fatal(err)
			}
			ts.Cache.SetNode(n)
		}
		for node, mib := range map[string]int64{"n1": 8192, "n3": 12288} {
			if err := ts.Cache.Assume(types.UID("busy-"+node), "default/busy-"+node, &alloc.Placement{Node: node,
				Booked: []alloc.Assignment{{GPU: 0, UUID: "GPU-" + node + "-0", Usage: alloc.Usage{MemoryMiB: mib}}}}); err != nil {
				t.Fatal(err)
			}
		}
		got := ts.filter(t, pod("small", 1024), "n4", "n3", "n2", "n1", "n3")
		switch {
		case !bestOnly && !slices.Equal(got, []string{"n3", "n1"}):
			t.Errorf("MaxNodes 2: passed %v, want [n3 n1]", got)
		case bestOnly && (len(got) != 1 || got[0] != "n1" && got[0] != "n3"):
			t.Errorf("BestOnly: passed %v, want n1 or n3 alone", got)
		}
	}
}

// TestFilterKubeSchedulerBody: a call as kube-scheduler writes it, for a
// pod the informer holds in the same version, gets the answer the same
// call in lower-case keys gets (which encoding/json decodes).
func TestFilterKubeSchedulerBody(t *testing.T) {
	p := pod("small", 1024)
	p.ResourceVersion = "42"
	ts := newTestServer(t)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(p); err != nil {
		t.Fatal(err)
	}
	ts.Pods = corelisters.NewPodLister(indexer)
	ts.handler = ts.Handler()
	if err := ts.Cache.Assume("busy", "default/busy", &alloc.Placement{Node: "n2",
		Booked: []alloc.Assignment{{GPU: 0, UUID: "GPU-n2-0", Usage: alloc.Usage{MemoryMiB: 16384}}}}); err != nil {
		t.Fatal(err)
	}
	answers := make([]string, 2)
	for i, body := range [][]byte{
		kubeSchedulerArgs(t, "n2", "n1", "n9"),
		[]byte(strings.NewReplacer(`"Pod"`, `"pod"`, `"NodeNames"`, `"nodenames"`).Replace(string(kubeSchedulerArgs(t, "n2", "n1", "n9")))),
	} {
		w := ts.post("filter", body)
		if w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		answers[i] = w.Body.String()
	}
	if answers[0] != answers[1] {
		t.Errorf("kube-scheduler's body: %s\nlower-case keys: %s", answers[0], answers[1])
	}
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal([]byte(answers[0]), &res); err != nil || res.NodeNames == nil || !slices.Equal(*res.NodeNames, []string{"n1"}) ||
		!strings.HasPrefix(res.FailedNodes["n2"], "InsufficientGPUMemory") || res.FailedAndUnresolvableNodes["n9"] != decision.ReasonNotGPUShareNode {
		t.Errorf("answer %s, want n1 passed, n2 full, n9 outside gpushare", answers[0])
	}
}
