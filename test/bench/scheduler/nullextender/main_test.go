package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFilterSpreads checks that filter passes each call's pod on one node
// it was given, a different one from call to call, and says so when it
// was given none.
func TestFilterSpreads(t *testing.T) {
	call := func(body string) (names []string, errText string) {
		w := httptest.NewRecorder()
		filter(w, httptest.NewRequest("POST", "/gpushare-scheduler/filter", strings.NewReader(body)))
		var got struct {
			NodeNames []string
			Error     string
		}
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("answer %q: %v", w.Body.String(), err)
		}
		return got.NodeNames, got.Error
	}
	body := `{"Pod":{"metadata":{"name":"p","annotations":{"a":"]"}}},"Nodes":null,"NodeNames":["node-a","node-b","node-c"]}`
	seen := map[string]bool{}
	for range 3 {
		names, errText := call(body)
		if errText != "" || len(names) != 1 {
			t.Fatalf("got %q, error %q; want one node", names, errText)
		}
		if !strings.HasPrefix(names[0], "node-") || len(names[0]) != len("node-a") {
			t.Fatalf("passed on %q, not one of the names given", names[0])
		}
		seen[names[0]] = true
	}
	if len(seen) != 3 {
		t.Errorf("three calls passed the pod on %d distinct nodes, want 3: %v", len(seen), seen)
	}
	for _, body := range []string{`{"Pod":{},"NodeNames":[]}`, `{"Pod":{}}`, `not json`} {
		if names, errText := call(body); errText == "" || names != nil {
			t.Errorf("%s: got %q, error %q; want an error and no node", body, names, errText)
		}
	}
}
