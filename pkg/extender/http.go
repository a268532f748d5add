package extender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Bounds on what requests may hold in memory. A body is read into a
// buffer at most twice its size, garbage included, and decoded memory is
// a small multiple of it, so bodies hold at most about 2 x MaxInflight x
// MaxBodyBytes for filter and prioritize (64 MiB by default) plus
// 2 x MaxBindsInflight x BindBodyBytes for bind (4 MiB). Binds that wait
// for a slot hold no body yet.
const (
	// DefaultMaxBodyBytes bounds a filter or prioritize body. With
	// nodeCacheCapable true (deploy/extender-scheduler-config.yaml) a call
	// carries the pod and node names: for 5000 nodes about 150 KB besides
	// the pod. With false it carries whole Node objects, a few KB each
	// (more with many images): clusters of more than about a thousand
	// nodes raise --max-request-bytes, or use true.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultMaxInflight bounds filter and prioritize calls in flight.
	// kube-scheduler makes them one at a time (its scheduling cycle is
	// sequential); the rest is room for a second scheduler taking over.
	DefaultMaxInflight = 4
	// DefaultMaxBindsInflight bounds bind calls in flight. kube-scheduler
	// binds in a goroutine per pod, so several come at once.
	DefaultMaxBindsInflight = 32
	// BindsQueuedPerSlot is how many bind calls per slot may wait for
	// one, before their bodies are read, rather than get 429:
	// kube-scheduler does not retry a failed bind, it fails the pod's
	// attempt and retries the pod after a backoff. When the apiserver
	// slows, binds take longer and more are in flight at once: 158 of
	// 10,000 pods were turned away in a round of the scheduler benchmark
	// at 5000 nodes.
	BindsQueuedPerSlot = 8
	// BindBodyBytes bounds a bind body: ExtenderBindingArgs is four
	// strings.
	BindBodyBytes = 64 << 10
	// retryAfter is the Retry-After of a 429, in seconds.
	retryAfter = "1"
)

// Handler returns the HTTP handler: POST {prefix}/filter, /prioritize,
// /bind and GET /healthz.
func (s *Server) Handler() http.Handler {
	bodies := s.MaxBodyBytes
	if bodies <= 0 {
		bodies = DefaultMaxBodyBytes
	}
	calls := newLimit(s.MaxInflight, DefaultMaxInflight, 0, bodies)
	binds := newLimit(s.MaxBindsInflight, DefaultMaxBindsInflight, BindsQueuedPerSlot, BindBodyBytes)
	s.binds = binds
	mux := http.NewServeMux()
	p := strings.TrimSuffix(s.Prefix, "/")
	mux.HandleFunc("POST "+p+"/filter", s.handle("filter", calls, s.filter))
	mux.HandleFunc("POST "+p+"/prioritize", s.handle("prioritize", calls, s.prioritize))
	mux.HandleFunc("POST "+p+"/bind", s.handle("bind", binds, s.bind))
	mux.HandleFunc("GET /healthz", s.Healthz)
	return mux
}

// Healthz answers 200 once the cache has synced, else 503. It reveals
// nothing else, so it may be served without authentication.
func (s *Server) Healthz(w http.ResponseWriter, _ *http.Request) {
	if s.Ready != nil && !s.Ready() {
		http.Error(w, "cache not synced", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// limit is a number of request slots and the body size each may read.
type limit struct {
	slots chan struct{}
	// queue holds a token per call waiting for a slot; nil: none waits.
	queue chan struct{}
	bytes int64
}

// newLimit bounds calls in flight to n (def if n is 0), each body to
// bytes, and lets perSlot calls per slot wait for one.
func newLimit(n, def, perSlot int, bytes int64) *limit {
	if n <= 0 {
		n = def
	}
	l := &limit{slots: make(chan struct{}, n), bytes: bytes}
	if perSlot > 0 {
		l.queue = make(chan struct{}, n*perSlot)
	}
	return l
}

// acquire takes a slot, waiting for one while the queue has room and ctx
// lasts; false when it got none.
func (l *limit) acquire(ctx context.Context) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	if l.queue == nil {
		return false
	}
	select {
	case l.queue <- struct{}{}:
	default:
		return false
	}
	defer func() { <-l.queue }()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l *limit) release() { <-l.slots }

// Errors in the request, each with its status.
type (
	// badRequest is answered with 400.
	badRequest struct{ error }
	// tooLarge is answered with 413.
	tooLarge struct{ error }
)

// handle answers one verb: a body announced larger than the limit gets
// 413 at once, a call beyond the bound in flight (and its queue, for
// binds) 429 with Retry-After, both before the body is read; a body that turns out larger gets 413, a
// malformed one 400 with the reason. Otherwise fn's result is encoded. A
// panic is never the answer to input.
func (s *Server) handle(verb string, l *limit, fn func(context.Context, []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		result := s.serve(w, r, verb, l, fn)
		s.Metrics.observe(verb, result, time.Since(start))
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, verb string, l *limit, fn func(context.Context, []byte) (any, error)) (result string) {
	if r.ContentLength > l.bytes {
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("%s: request body of %d bytes is larger than %d bytes", verb, r.ContentLength, l.bytes), http.StatusRequestEntityTooLarge)
		return "too_large"
	}
	if !l.acquire(r.Context()) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", retryAfter)
		http.Error(w, fmt.Sprintf("%s: too many requests in flight (%d)", verb, cap(l.slots)), http.StatusTooManyRequests)
		return "too_many"
	}
	defer l.release()
	body, err := readBody(w, r, l.bytes)
	var out any
	if err == nil {
		out, err = fn(r.Context(), body)
	}
	var refused *refusal
	switch {
	case errors.As(err, new(tooLarge)):
		http.Error(w, fmt.Sprintf("%s: %v", verb, err), http.StatusRequestEntityTooLarge)
		return "too_large"
	case errors.As(err, new(badRequest)):
		http.Error(w, fmt.Sprintf("%s: %v", verb, err), http.StatusBadRequest)
		return "bad_request"
	case errors.As(err, &refused):
		// kube-scheduler reads a refused bind from the body.
		out, result = refused.answer, refused.result
	case err != nil:
		http.Error(w, fmt.Sprintf("%s: %v", verb, err), http.StatusInternalServerError)
		return "error"
	default:
		result = "ok"
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		s.Logger.Error(err, "Writing the response", "verb", verb)
	}
	return result
}

// readBody reads at most limit bytes. The buffer starts at the announced
// size, if any, and otherwise doubles up to limit+1 bytes, never past:
// a request holds at most about twice the bound, garbage included.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	size := int64(4 << 10)
	if r.ContentLength > 0 {
		// One byte more sees the end without growing.
		size = r.ContentLength + 1
	}
	buf := make([]byte, 0, min(size, limit+1))
	for {
		if len(buf) == cap(buf) {
			buf = append(make([]byte, 0, min(2*int64(cap(buf)), limit+1)), buf...)
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		var big *http.MaxBytesError
		switch {
		case errors.Is(err, io.EOF):
			return buf, nil
		case errors.As(err, &big):
			return nil, tooLarge{fmt.Errorf("request body larger than %d bytes", limit)}
		case err != nil:
			return nil, badRequest{fmt.Errorf("reading the request: %w", err)}
		}
	}
}
