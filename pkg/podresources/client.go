package podresources

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/clock"
)

// KeepListing is how long the latest listing is kept for containers that
// start after it: a burst of starts shares listings, and between bursts
// the daemon keeps none (a listing names every device of every container
// on the node, MiBs with memory tokens) and gives the memory back.
const KeepListing = 2 * time.Second

// maxListBytes bounds a PodResources listing: it names every device of
// every container on the node, one MiB token each.
const maxListBytes = 256 << 20

// Client asks the kubelet's PodResources API who holds devices. Callers
// share listings (one under way if it began late enough for them, else
// the next) and Gets of single pods (one begun late enough).
//
// A call may serve only callers whose devices were allocated before it
// began: one begun before may show a pod holding devices that the kubelet
// has since freed and given to another pod. So calls are joined by their
// start time, not merely while in flight as a singleflight.Group would.
type Client struct {
	conn   *grpc.ClientConn
	logger klog.Logger
	clock  clock.WithDelayedExecution

	mu sync.Mutex
	// current waits for the listing under way, begun at currentStarted;
	// waiting for the next one.
	current, waiting []chan *Listing
	currentStarted   time.Time
	running          bool
	// last is the latest successful listing. It and the Gets are dropped
	// by the drop timer KeepListing after the latest of them (used).
	last *Listing
	used time.Time
	drop clock.Timer
	// closed is set by Close.
	closed bool
	// gets are the latest Gets of single pods, by namespace/name, until
	// a listing begun after them is done.
	gets map[string]*Get
}

// Get is a PodResources Get of one pod, shared by the callers that may
// use it: those whose claims were allocated before it began.
type Get struct {
	started time.Time
	done    chan struct{}
	// l lists the one pod; nil if err.
	l   *Listing
	err error
}

// Done is closed once the Get has its answer.
func (g *Get) Done() <-chan struct{} { return g.done }

// Result is the Get's answer, once Done is closed: a listing of the one
// pod.
func (g *Get) Result() (*Listing, error) { return g.l, g.err }

// Dial connects to the kubelet's PodResources socket. A nil clk is the
// real clock.
func Dial(logger klog.Logger, socket string, clk clock.WithDelayedExecution) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxListBytes)))
	if err != nil {
		return nil, fmt.Errorf("pod resources socket %s: %w", socket, err)
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Client{conn: conn, logger: logger, clock: clk}, nil
}

// Close closes the connection.
func (r *Client) Close() error {
	r.mu.Lock()
	r.closed = true
	if r.drop != nil {
		r.drop.Stop()
	}
	r.mu.Unlock()
	return r.conn.Close()
}

// Recent returns the latest listing if it was asked for after since.
func (r *Client) Recent(since time.Time) *Listing {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != nil && r.last.started.After(since) {
		return r.last
	}
	return nil
}

// List returns a listing begun after since: the one under way if it
// began after since, else the next.
func (r *Client) List(ctx context.Context, since time.Time) (*Listing, error) {
	ch := make(chan *Listing, 1)
	r.mu.Lock()
	if r.current != nil && r.currentStarted.After(since) {
		r.current = append(r.current, ch)
	} else {
		r.waiting = append(r.waiting, ch)
		if !r.running {
			r.running = true
			go r.run()
		}
	}
	r.mu.Unlock()
	select {
	case l := <-ch:
		return l, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run lists for the waiting callers until none is left.
func (r *Client) run() {
	for {
		r.mu.Lock()
		if len(r.waiting) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		started := r.clock.Now()
		r.current, r.waiting, r.currentStarted = r.waiting, nil, started
		r.mu.Unlock()
		l, err := r.call(podresourcesapi.PodResourcesLister_List_FullMethodName, &podresourcesapi.ListPodResourcesRequest{}, true)
		if err != nil {
			l = &Listing{err: err}
		}
		l.started = started
		r.mu.Lock()
		batch := r.current
		r.current = nil
		if l.err == nil {
			r.last = l
			for k, g := range r.gets {
				if g.started.Before(l.started) {
					delete(r.gets, k)
				}
			}
		}
		r.touch()
		r.mu.Unlock()
		r.logger.V(4).Info("Listed the kubelet's pod resources", "containers", len(l.containers),
			"callers", len(batch), "took", r.clock.Since(l.started), "err", l.err)
		for _, ch := range batch {
			ch <- l
		}
	}
}

// call calls a PodResources method (List if list, else Get) and decodes
// its answer. The kubelet rate-limits the API (10 calls at once, then 100
// a second, for every client together) and refuses a call over the limit
// with ResourceExhausted: call tries again, backing off, until its
// deadline. An answer to a later try is as fresh as the first try's
// would have been, or fresher.
func (r *Client) call(method string, req proto.Message, list bool) (*Listing, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var raw []byte
	wait := 20 * time.Millisecond
	for try := 1; ; try++ {
		err := r.conn.Invoke(ctx, method, req, &raw, grpc.ForceCodecV2(rawCodec{}))
		if err == nil {
			break
		}
		if !rateLimited(err) {
			return nil, err
		}
		r.logger.V(4).Info("The kubelet's PodResources API is rate-limited; trying again", "method", method, "try", try, "after", wait)
		t := time.NewTimer(wait + rand.N(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (rate-limited by the kubelet, %d tries)", err, try)
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
	return Decode(raw, list)
}

// rateLimited reports whether err is the kubelet's refusal of a call over
// its PodResources rate limit ("rejected by rate limit"), rather than,
// say, an answer too large, which is also ResourceExhausted.
func rateLimited(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "rate limit")
}

// Latest returns the latest listing, however old; nil if none is kept.
func (r *Client) Latest() *Listing {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// Get asks the kubelet about one pod (PodResources Get), or joins a Get
// of it begun after since. Only such a Get may say who holds devices that
// Allocate gave at since: one begun before may show a pod holding devices
// that the kubelet has since freed and given to another pod.
func (r *Client) Get(namespace, name string, since time.Time) *Get {
	key := namespace + "/" + name
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.gets[key]; g != nil && g.started.After(since) {
		return g
	}
	g := &Get{started: r.clock.Now(), done: make(chan struct{})}
	if r.gets == nil {
		r.gets = map[string]*Get{}
	}
	r.gets[key] = g
	go func() {
		defer close(g.done)
		g.l, g.err = r.call(podresourcesapi.PodResourcesLister_Get_FullMethodName,
			&podresourcesapi.GetPodResourcesRequest{PodNamespace: namespace, PodName: name}, false)
		if g.l != nil {
			g.l.started = g.started
		}
		r.mu.Lock()
		r.touch()
		r.mu.Unlock()
	}()
	return g
}

// touch notes that a listing or a Get just ended, and drops both
// KeepListing from now (r.mu held).
func (r *Client) touch() {
	r.used = r.clock.Now()
	if r.closed {
		return
	}
	if r.drop == nil {
		r.drop = r.clock.AfterFunc(KeepListing, r.forget)
	} else {
		r.drop.Reset(KeepListing)
	}
}

// Held reports whether a kept Get, done, shows the pod holding resource.
func (r *Client) Held(resource, namespace, name string) bool {
	r.mu.Lock()
	g := r.gets[namespace+"/"+name]
	r.mu.Unlock()
	if g == nil {
		return false
	}
	select {
	case <-g.done:
		return g.err == nil && g.l.Shows(resource, namespace, name)
	default:
		return false
	}
}

// FromGets looks for the container holding exactly ids among the pods
// of the kept Gets begun after since.
func (r *Client) FromGets(resource string, ids []string, since time.Time) (Holder, bool) {
	if len(ids) == 0 {
		return Holder{}, false
	}
	var want []string
	r.mu.Lock()
	var gets []*Get
	for _, g := range r.gets {
		if g.started.After(since) {
			gets = append(gets, g)
		}
	}
	r.mu.Unlock()
	for _, g := range gets {
		select {
		case <-g.done:
		default:
			continue
		}
		if g.err != nil {
			continue
		}
		if want == nil {
			want = inOrder(ids)
		}
		if h, ok := g.l.exact(resource, want); ok {
			return h, true
		}
	}
	return Holder{}, false
}

// forget drops the latest listing and the Gets once the kubelet has
// been asked nothing for KeepListing, and returns the memory the burst
// used to the system.
func (r *Client) forget() {
	r.mu.Lock()
	idle := (r.last != nil || len(r.gets) > 0) && !r.running && r.clock.Since(r.used) >= KeepListing
	if idle {
		r.last, r.gets = nil, nil
	}
	r.mu.Unlock()
	if idle {
		debug.FreeOSMemory()
	}
}
