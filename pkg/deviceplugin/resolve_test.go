package deviceplugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// A container whose pod the latest listing does not show is found by
// asking the kubelet about each pod that listing does not show (Get), not
// by listing the node again; past maxGets such pods, ask gives up, asking
// nothing, and the node is listed.
func TestAskPods(t *testing.T) {
	n := startNode(t)
	const resource = "gpushare.io/gpu-mem"
	admit := func(names ...string) {
		t.Helper()
		for i, name := range names {
			if err := n.admit(n.pod(name, share{container: "main", kind: gpusharev1.ContainerApp, gpu: i % 2, mib: 100})); err != nil {
				t.Fatalf("admitting %s: %v", name, err)
			}
		}
		// The listing taken after the Allocate calls shows them all.
		deadline := time.Now().Add(10 * time.Second)
		for {
			l := n.m.pr.latest()
			if l != nil && !slices.ContainsFunc(names, func(name string) bool { return !l.shows(resource, "default", name) }) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no listing shows %v", names)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// stale makes the latest listing one that shows only a and b.
	admit("a", "b")
	old := n.m.pr.latest()
	stale := func() {
		n.m.pr.mu.Lock()
		defer n.m.pr.mu.Unlock()
		old.started = time.Now()
		n.m.pr.last = old
	}
	ids := func(pod string) []string {
		return slices.Collect(maps.Keys(n.Manager().GetDevices("uid-"+pod, "main")[resource]))
	}
	calls := func() (lists, gets int) {
		c := n.PodResourcesCalls()
		return c["List"], c["Get"]
	}

	admit("c", "d")
	stale()
	lists, gets := calls()
	h, ok := n.m.ask(context.Background(), resource, ids("d"), time.Now())
	if want := (holder{Namespace: "default", Pod: "d", Container: "main"}); !ok || h != want {
		t.Errorf("ask for d's devices = %+v, %v; want %+v", h, ok, want)
	}
	if l, g := calls(); l != lists || g != gets+2 {
		t.Errorf("ask made %d List and %d Get calls; want 0 and 2 (c and d)", l-lists, g-gets)
	}

	var more []string
	for i := range maxGets - 1 {
		more = append(more, fmt.Sprintf("e%02d", i))
	}
	admit(more...)
	stale()
	lists, gets = calls()
	if h, ok := n.m.ask(context.Background(), resource, ids("d"), time.Now()); ok {
		t.Errorf("ask among %d pods found %+v; want none asked", maxGets+1, h)
	}
	if l, g := calls(); l != lists || g != gets {
		t.Errorf("ask among %d pods made %d List and %d Get calls; want none", maxGets+1, l-lists, g-gets)
	}
	// Starting the container finds it all the same.
	env, err := n.start(n.pod("d", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 1, mib: 100}), "main")
	if err != nil || env["NVIDIA_VISIBLE_DEVICES"] != n.gpuUUID(1) {
		t.Errorf("starting d: %v, %v", env, err)
	}
}
