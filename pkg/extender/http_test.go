package extender

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBodyBounds: a body larger than the bound gets 413, whether its
// length is announced or not; bind's bound is its own, smaller one.
func TestBodyBounds(t *testing.T) {
	big := `{"pod":{},"nodenames":["a"],"padding":"` + strings.Repeat("x", 2<<20) + `"}`
	// exact is 1 MiB, the bound, to the byte.
	head, tail := `{"pod":{},"nodenames":[],"padding":"`, `"}`
	exact := head + strings.Repeat("x", 1<<20-len(head)-len(tail)) + tail
	cases := map[string]struct {
		verb, body string
		announce   bool
		want       int
		wantBody   string
	}{
		"filter, announced":                    {"filter", big, true, http.StatusRequestEntityTooLarge, "larger than 1048576 bytes"},
		"filter, chunked":                      {"filter", big, false, http.StatusRequestEntityTooLarge, "larger than 1048576 bytes"},
		"prioritize, announced":                {"prioritize", big, true, http.StatusRequestEntityTooLarge, "larger than 1048576 bytes"},
		"bind, over 64 KiB":                    {"bind", `{"podName":"` + strings.Repeat("x", 65<<10) + `"}`, true, http.StatusRequestEntityTooLarge, "larger than 65536 bytes"},
		"bind, chunked, 64 KiB":                {"bind", `{"podName":"` + strings.Repeat("x", 65<<10) + `"}`, false, http.StatusRequestEntityTooLarge, "larger than 65536 bytes"},
		"filter, malformed":                    {"filter", `{"pod":`, true, http.StatusBadRequest, "malformed JSON"},
		"bind, missing the node":               {"bind", `{"podName":"p","podNamespace":"default"}`, true, http.StatusBadRequest, "bind needs"},
		"filter, chunked, the bound exactly":   {"filter", exact, false, http.StatusOK, "{"},
		"filter, announced, the bound exactly": {"filter", exact, true, http.StatusOK, "{"},
		"filter, chunked, a byte over":         {"filter", exact + " ", false, http.StatusRequestEntityTooLarge, "larger than"},
		"filter, within the bound":             {"filter", `{"pod":{},"nodenames":[],"padding":"` + strings.Repeat("x", 1<<19) + `"}`, true, http.StatusOK, "{"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ts := newTestServer(t)
			var body io.Reader = strings.NewReader(c.body)
			if !c.announce {
				body = io.MultiReader(body) // hides the length
			}
			r := httptest.NewRequest(http.MethodPost, "/gpushare-scheduler/"+c.verb, body)
			if !c.announce {
				r.ContentLength = -1
			}
			w := httptest.NewRecorder()
			ts.handler.ServeHTTP(w, r)
			if w.Code != c.want || !strings.Contains(w.Body.String(), c.wantBody) {
				t.Errorf("%d %.80q; want %d with %q", w.Code, w.Body, c.want, c.wantBody)
			}
		})
	}
}

// gate is a body that reports when it is first read and then blocks
// until released.
type gate struct {
	read    chan struct{}
	release chan struct{}
	rest    io.Reader
}

func newGate() *gate {
	return &gate{read: make(chan struct{}), release: make(chan struct{}), rest: strings.NewReader(`{}`)}
}

func (g *gate) Read(p []byte) (int, error) {
	select {
	case <-g.read:
	default:
		close(g.read)
		<-g.release
	}
	return g.rest.Read(p)
}

// TestInflightBound: with MaxInflight calls reading their bodies, the
// next filter or prioritize call gets 429 with Retry-After before its
// body is read; binds have their own slots; a freed slot serves again.
func TestInflightBound(t *testing.T) {
	ts := newTestServer(t)
	ts.MaxInflight = 2
	ts.handler = ts.Handler()
	send := func(verb string, body io.Reader) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/gpushare-scheduler/"+verb, body)
		r.ContentLength = -1
		w := httptest.NewRecorder()
		ts.handler.ServeHTTP(w, r)
		return w
	}
	gates := []*gate{newGate(), newGate()}
	done := make(chan *httptest.ResponseRecorder, len(gates))
	for _, g := range gates {
		go func() { done <- send("filter", g) }()
		<-g.read
	}
	for _, verb := range []string{"filter", "prioritize"} {
		third := newGate()
		w := send(verb, third)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Errorf("%s beyond the bound: %d, Retry-After %q; want 429 with Retry-After", verb, w.Code, w.Header().Get("Retry-After"))
		}
		select {
		case <-third.read:
			t.Errorf("%s beyond the bound: its body was read", verb)
		default:
		}
	}
	if w := send("bind", strings.NewReader(`{"podName":"p"}`)); w.Code != http.StatusBadRequest {
		t.Errorf("bind while filter calls fill their slots: %d %s; want 400 (served)", w.Code, w.Body)
	}
	close(gates[0].release)
	if w := <-done; w.Code != http.StatusBadRequest {
		t.Errorf("the first call: %d %s; want 400 (no pod)", w.Code, w.Body)
	}
	if w := send("filter", bytes.NewReader([]byte(`{}`))); w.Code != http.StatusBadRequest {
		t.Errorf("after a slot was freed: %d %s; want 400 (served)", w.Code, w.Body)
	}
	close(gates[1].release)
	<-done
}
