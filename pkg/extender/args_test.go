package extender

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// kubeSchedulerArgs is a filter call's body as kube-scheduler writes it.
func kubeSchedulerArgs(t testing.TB, names ...string) []byte {
	t.Helper()
	p := pod("small", 1024)
	p.ResourceVersion = "42"
	p.Annotations = map[string]string{"note": `a "quoted", [bracketed] value \ with escapes`}
	if names == nil {
		names = []string{}
	}
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: p, NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// checkScan fails t if scanArgs reads body other than encoding/json
// does: it may decline any body, but what it reads must be what
// argsHead decodes, from a body encoding/json finds valid.
func checkScan(t *testing.T, body []byte) (quickArgs, bool) {
	t.Helper()
	a, ok := scanArgs(body)
	if !ok {
		return a, false
	}
	if !json.Valid(body) {
		t.Fatalf("scanArgs read %q, which is not JSON", body)
	}
	var head argsHead
	if err := json.Unmarshal(body, &head); err != nil {
		t.Fatalf("scanArgs read %q, which encoding/json refuses: %v", body, err)
	}
	switch m := head.Pod; {
	case m == nil || head.NodeNames == nil || !isNull(head.Nodes):
		t.Fatalf("scanArgs read %q; encoding/json: pod %v, names %v, nodes %s", body, m, head.NodeNames, head.Nodes)
	case m.Metadata.Name != a.name || m.Metadata.Namespace != a.namespace || m.Metadata.UID != a.uid ||
		m.Metadata.ResourceVersion != a.resourceVersion || !slices.Equal(*head.NodeNames, a.names):
		t.Fatalf("scanArgs read %+v from %q; encoding/json %+v, names %q", a, body, m.Metadata, *head.NodeNames)
	}
	return a, true
}

// TestScanArgs: kube-scheduler's bodies are read, with the same pod and
// names as encoding/json reads; bodies of other shapes, with our keys in
// another case or twice, with escaped values, or not JSON, are left to
// encoding/json.
func TestScanArgs(t *testing.T) {
	body := kubeSchedulerArgs(t, "n1", "node-2.example", "n3")
	a, ok := checkScan(t, body)
	if !ok || a.name != "small" || a.namespace != "default" || a.uid != "uid-small" || a.resourceVersion != "42" ||
		!slices.Equal(a.names, []string{"n1", "node-2.example", "n3"}) {
		t.Fatalf("kube-scheduler's body: %+v %v", a, ok)
	}
	if a, ok := checkScan(t, kubeSchedulerArgs(t)); !ok || len(a.names) != 0 {
		t.Errorf("no names: %+v %v", a, ok)
	}
	s := string(body)
	for name, b := range map[string]string{
		"lower-case keys":      strings.NewReplacer(`"Pod"`, `"pod"`, `"NodeNames"`, `"nodenames"`).Replace(s),
		"Pod twice":            strings.Replace(s, `"Nodes":null`, `"Pod":{"metadata":{"name":"other"}}`, 1),
		"name twice":           strings.Replace(s, `"namespace"`, `"name":"other","namespace"`, 1),
		"metadata in capitals": strings.Replace(s, `"metadata"`, `"Metadata"`, 1),
		"name in capitals":     strings.Replace(s, `"name":"small"`, `"Name":"small"`, 1),
		"escaped key":          strings.Replace(s, `"Pod"`, `"P\u006fd"`, 1),
		"escaped name":         strings.Replace(s, `"name":"small"`, `"name":"sm\u0061ll"`, 1),
		"escaped node":         strings.Replace(s, `"n1"`, `"n\u0031"`, 1),
		"non-ASCII node":       strings.Replace(s, `"n1"`, `"n\xc3\xa9"`, 1),
		"Node objects":         strings.Replace(s, `"Nodes":null`, `"Nodes":{"items":[]}`, 1),
		"null names":           strings.Replace(s, `"NodeNames":["n1","node-2.example","n3"]`, `"NodeNames":null`, 1),
		"no names":             strings.Replace(s, `,"NodeNames":["n1","node-2.example","n3"]`, ``, 1),
		"a number for a node":  strings.Replace(s, `"n3"`, `3`, 1),
		"trailing comma":       strings.Replace(s, `"n3"]`, `"n3",]`, 1),
		"trailing text":        s + "x",
		"cut short":            s[:len(s)-1],
		"bad escape":           strings.Replace(s, `\\ with`, `\x with`, 1),
		"bad number":           strings.Replace(s, `"status":{}`, `"status":01`, 1),
		"control character":    strings.Replace(s, `bracketed`, "bracket\ted", 1),
		"an array":             `[` + s + `]`,
	} {
		if a, ok := checkScan(t, []byte(b)); ok {
			t.Errorf("%s: read %+v from %s", name, a, b)
		}
	}
	// Space and unknown keys of any kind are read past.
	var spaced bytes.Buffer
	if err := json.Indent(&spaced, []byte(strings.Replace(s, `"status":{}`, `"status":{"x":[1,-2.5e+3,true,false,null,{"y":"\u00e9\n"}]}`, 1)), "\r", "\t "); err != nil {
		t.Fatal(err)
	}
	if a, ok := checkScan(t, spaced.Bytes()); !ok || a.name != "small" || len(a.names) != 3 {
		t.Errorf("spaced: %+v %v from %s", a, ok, spaced.Bytes())
	}
}

// FuzzScanArgs: scanArgs never reads a body other than encoding/json
// does (checkScan).
func FuzzScanArgs(f *testing.F) {
	f.Add(kubeSchedulerArgs(f, "n1", "n2"))
	f.Add(kubeSchedulerArgs(f))
	f.Add([]byte(`{"Pod":{"metadata":{"name":"p","uid":"u","resourceVersion":"1"}},"Nodes":null,"NodeNames":["a"]}`))
	f.Add([]byte(`{"Pod":{"metadata":{"name":"p"},"spec":[1.5e3,-0,"\u0041",{}]},"NodeNames":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		checkScan(t, body)
	})
}
