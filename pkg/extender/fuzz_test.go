package extender

import (
	"encoding/json"
	"net/http"
	"testing"
)

// FuzzHandler: arbitrary bodies to filter, prioritize and bind never
// panic and never get a 5xx; bad input gets 4xx; a pod that is not bound
// books nothing beyond the reservation of its latest filter call. Before each input, filter has passed pod
// "gpu" on n1 and pod "plain" on n2, so a fuzzed bind can also succeed.
func FuzzHandler(f *testing.F) {
	verbs := []string{"filter", "prioritize", "bind"}
	gpu, plain := pod("gpu", 1024), pod("plain", 0)
	seed := func(verb int, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(verb), b)
	}
	seed(0, map[string]any{"pod": gpu, "nodenames": []string{"n1", "n2", "n3"}})
	seed(1, map[string]any{"pod": gpu, "nodenames": []string{"n1", "n2"}})
	seed(0, map[string]any{"pod": plain, "nodes": map[string]any{"items": []any{map[string]any{"metadata": map[string]any{"name": "n1"}}}}})
	seed(2, map[string]any{"podName": "gpu", "podNamespace": "default", "podUID": gpu.UID, "node": "n1"})
	seed(2, map[string]any{"podName": "gpu", "podNamespace": "default", "podUID": gpu.UID, "node": "n2"})
	seed(2, map[string]any{"podName": "gpu", "podNamespace": "default", "node": "n1"})
	seed(2, map[string]any{"podName": "plain", "podNamespace": "default", "podUID": plain.UID, "node": "n2"})
	seed(2, map[string]any{"podName": "ghost", "podNamespace": "default", "node": "n1"})
	f.Add(uint8(0), []byte(`{"pod":`))
	f.Add(uint8(1), []byte(`{"pod":{"spec":{"containers":[{"resources":{"limits":{"gpushare.io/gpu-core":"150"}}}]}},"nodenames":["n1"]}`))
	f.Add(uint8(2), []byte(`[1,2,3]`))
	f.Fuzz(func(t *testing.T, verb uint8, body []byte) {
		ts := newTestServer(t, gpu.DeepCopy(), plain.DeepCopy())
		ts.filter(t, gpu, "n1")
		ts.filter(t, plain, "n2")
		v := verbs[int(verb)%len(verbs)]
		w := ts.post(v, body)
		switch {
		case w.Code >= 500:
			t.Fatalf("%s: %d %s", v, w.Code, w.Body)
		case w.Code != http.StatusOK && (w.Code < 400 || w.Code >= 500):
			t.Fatalf("%s: unexpected status %d", v, w.Code)
		case w.Code == http.StatusOK && !json.Valid(w.Body.Bytes()):
			t.Fatalf("%s: 200 with a body that is not JSON: %q", v, w.Body)
		}
		for _, p := range []string{"gpu", "plain"} {
			node := ts.boundTo(p)
			uid := pod(p, 0).UID
			held, assumed := ts.Cache.Holding(uid)
			if held != nil && node == "" {
				// Only what its latest filter call reserved.
				if !assumed || !ts.reserved.holds(uid) {
					t.Fatalf("pod %s is not bound but books %v, not as a reservation", p, held)
				}
				if passed, _ := ts.passed.check(uid, held.Node); !passed {
					t.Fatalf("pod %s is not bound but books %v, on a node its latest filter did not pass", p, held)
				}
			}
			if held != nil && node != "" && held.Node != node {
				t.Fatalf("pod %s is bound to %s but books %s", p, node, held.Node)
			}
			if want := map[string]string{"gpu": "n1", "plain": "n2"}[p]; node != "" && node != want {
				t.Fatalf("pod %s bound to %s, a node filter did not pass", p, node)
			}
		}
	})
}
