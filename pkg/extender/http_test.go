package extender

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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

// TestBindsWaitForASlot: a bind beyond MaxBindsInflight waits for a slot,
// its body unread, and is served once one frees; BindsQueuedPerSlot per
// slot wait, and the next gets 429 with Retry-After at once; a bind whose
// caller gives up while it waits gets 429 and frees its place.
func TestBindsWaitForASlot(t *testing.T) {
	ts := newTestServer(t)
	ts.MaxBindsInflight = 1
	ts.handler = ts.Handler()
	send := func(ctx context.Context, body io.Reader) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/gpushare-scheduler/bind", body)
		r.ContentLength = -1
		w := httptest.NewRecorder()
		ts.handler.ServeHTTP(w, r)
		return w
	}
	holder := newGate()
	held := make(chan *httptest.ResponseRecorder, 1)
	go func() { held <- send(context.Background(), holder) }()
	<-holder.read
	// A waiter that gives up.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan *httptest.ResponseRecorder, 1)
	quitter := newGate()
	go func() { gaveUp <- send(ctx, quitter) }()
	waitFor(t, "the first waiter to queue", func() bool { return len(ts.binds.queue) == 1 })
	cancel()
	if w := <-gaveUp; w.Code != http.StatusTooManyRequests {
		t.Errorf("a bind whose caller gave up while waiting: %d; want 429", w.Code)
	}
	waiters := make([]*gate, BindsQueuedPerSlot)
	served := make(chan *httptest.ResponseRecorder, len(waiters))
	for i := range waiters {
		waiters[i] = newGate()
		go func() { served <- send(context.Background(), waiters[i]) }()
	}
	waitFor(t, "every waiter to queue", func() bool { return len(ts.binds.queue) == BindsQueuedPerSlot })
	over := newGate()
	if w := send(context.Background(), over); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("a bind beyond the queue: %d, Retry-After %q; want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	for _, g := range append(waiters, quitter, over) {
		select {
		case <-g.read:
			t.Fatal("a bind without a slot had its body read")
		default:
		}
	}
	close(holder.release)
	if w := <-held; w.Code != http.StatusBadRequest {
		t.Errorf("the bind holding the slot: %d %s; want 400 (served)", w.Code, w.Body)
	}
	for range waiters {
		// Each waiter reads its body when it gets the slot: let it.
		var g *gate
		waitFor(t, "a waiter to get the slot", func() bool {
			for _, w := range waiters {
				select {
				case <-w.read:
					select {
					case <-w.release:
					default:
						g = w
						return true
					}
				default:
				}
			}
			return false
		})
		close(g.release)
		if w := <-served; w.Code != http.StatusBadRequest {
			t.Errorf("a bind that waited: %d %s; want 400 (served)", w.Code, w.Body)
		}
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
