package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// keepListing is how long the latest listing is kept for containers that
// start after it: a burst of starts shares listings, and between bursts
// the daemon keeps none (a listing names every device of every container
// on the node, MiBs with memory tokens) and gives the memory back.
const keepListing = 2 * time.Second

// maxListBytes bounds a PodResources listing: it names every device of
// every container on the node, one MiB token each.
const maxListBytes = 256 << 20

// holder is the pod container that holds some devices.
type holder struct {
	Namespace, Pod, Container string
	// Init is set when the devices belong to an init container of the
	// pod, not yet known which (see initContainer).
	Init bool
	// Hooked is set when the kubelet gave the listed container hooks
	// (gpusharev1.HookResource); an init container it found the devices
	// within holds them then too, allocated at the same admission.
	Hooked bool
}

// defers reports whether the devices of resource that h holds give it no
// GPUs of their own: the kubelet gave h hooks (not only a spec that asks
// for them: it gives none while the hook resource is not registered), and
// resource is another. Hooks tell an init container from the app
// container that reuses its devices by their number
// (deploy/gpu-hook-policy.yaml), where other resources may ask the same
// amount for both.
func (h holder) defers(resource string) bool {
	return h.Hooked && resource != gpusharev1.HookResource
}

// podResources asks the kubelet's PodResources API who holds devices.
// Callers share listings (one under way if it began late enough for
// them, else the next) and Gets of single pods (one begun late enough).
type podResources struct {
	conn   *grpc.ClientConn
	logger klog.Logger

	mu sync.Mutex
	// current waits for the listing under way, begun at currentStarted;
	// waiting for the next one.
	current, waiting []chan *listing
	currentStarted   time.Time
	running          bool
	// last is the latest successful listing. It and the Gets are dropped
	// by the drop timer keepListing after the latest of them (used).
	last *listing
	used time.Time
	drop *time.Timer
	// pre prefetches after (prefetchAfter) an Allocate, at preAt.
	pre   *time.Timer
	preAt time.Time
	after time.Duration
	// closed is set by close: no more prefetches.
	closed bool
	// gets are the latest Gets of single pods, by namespace/name, until
	// a listing begun after them is done.
	gets map[string]*podGet
}

// podGet is a PodResources Get of one pod, shared by the callers that
// may use it: those whose claims were allocated before it began.
type podGet struct {
	started time.Time
	done    chan struct{}
	// l lists the one pod; nil if err.
	l   *listing
	err error
}

// prefetchAfter is how long after an Allocate the daemon asks the
// kubelet, ahead of the containers' start: the kubelet records an
// allocation when Allocate returns. During a burst of admissions it asks
// every prefetchAfter, not only after the burst: where admissions are
// quick (few devices, such as hooks), containers start right after.
const prefetchAfter = 5 * time.Millisecond

// dialPodResources connects to the kubelet's PodResources socket.
func dialPodResources(logger klog.Logger, socket string) (*podResources, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxListBytes)))
	if err != nil {
		return nil, fmt.Errorf("pod resources socket %s: %w", socket, err)
	}
	return &podResources{conn: conn, logger: logger, after: prefetchAfter}, nil
}

func (r *podResources) close() error {
	r.mu.Lock()
	r.closed = true
	for _, t := range []*time.Timer{r.drop, r.pre} {
		if t != nil {
			t.Stop()
		}
	}
	r.mu.Unlock()
	return r.conn.Close()
}

// recent returns the latest listing if it was asked for after since.
func (r *podResources) recent(since time.Time) *listing {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != nil && r.last.started.After(since) {
		return r.last
	}
	return nil
}

// list returns a listing begun after since: the one under way if it
// began after since, else the next.
func (r *podResources) list(ctx context.Context, since time.Time) (*listing, error) {
	ch := make(chan *listing, 1)
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
func (r *podResources) run() {
	for {
		r.mu.Lock()
		if len(r.waiting) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		started := time.Now()
		r.current, r.waiting, r.currentStarted = r.waiting, nil, started
		r.mu.Unlock()
		l, err := r.call(podresourcesapi.PodResourcesLister_List_FullMethodName, &podresourcesapi.ListPodResourcesRequest{}, true)
		if err != nil {
			l = &listing{err: err}
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
			"callers", len(batch), "took", time.Since(l.started), "err", l.err)
		for _, ch := range batch {
			ch <- l
		}
	}
}

// call calls a PodResources method (List if list, else Get) and decodes
// its answer.
func (r *podResources) call(method string, req proto.Message, list bool) (*listing, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var raw []byte
	if err := r.conn.Invoke(ctx, method, req, &raw, grpc.ForceCodecV2(rawCodec{})); err != nil {
		return nil, err
	}
	return decodeListing(raw, list)
}

// latest returns the latest listing, however old; nil if none is kept.
func (r *podResources) latest() *listing {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// get asks the kubelet about one pod (PodResources Get), or joins a Get
// of it begun after since. Only such a Get may say who holds devices that
// Allocate gave at since: one begun before may show a pod holding devices
// that the kubelet has since freed and given to another pod.
func (r *podResources) get(namespace, name string, since time.Time) *podGet {
	key := namespace + "/" + name
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.gets[key]; g != nil && g.started.After(since) {
		return g
	}
	g := &podGet{started: time.Now(), done: make(chan struct{})}
	if r.gets == nil {
		r.gets = map[string]*podGet{}
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
// keepListing from now (r.mu held).
func (r *podResources) touch() {
	r.used = time.Now()
	if r.drop == nil {
		r.drop = time.AfterFunc(keepListing, r.forget)
	} else {
		r.drop.Reset(keepListing)
	}
}

// held reports whether a kept Get, done, shows the pod holding resource.
func (r *podResources) held(resource, namespace, name string) bool {
	r.mu.Lock()
	g := r.gets[namespace+"/"+name]
	r.mu.Unlock()
	if g == nil {
		return false
	}
	select {
	case <-g.done:
		return g.err == nil && g.l.shows(resource, namespace, name)
	default:
		return false
	}
}

// fromGets looks for the container holding exactly ids among the pods
// of the kept Gets begun after since.
func (r *podResources) fromGets(resource string, ids []string, since time.Time) (holder, bool) {
	if len(ids) == 0 {
		return holder{}, false
	}
	var want []string
	r.mu.Lock()
	var gets []*podGet
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
	return holder{}, false
}

// prefetch calls fetch in the background prefetchAfter from now, or
// sooner if it is due sooner already: during a burst of allocations the
// prefetch runs every prefetchAfter, so that containers starting right
// after the burst find what they need ready. Its retry (0 for the first
// try) doubles the delay with each retry.
func (r *podResources) prefetch(fetch func(), retry int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	after := r.after << retry
	now := time.Now()
	at := now.Add(after)
	switch {
	case r.pre == nil:
		r.pre = time.AfterFunc(after, fetch)
	case r.preAt.After(now) && !r.preAt.After(at):
		return // due sooner
	default:
		r.pre.Reset(after)
	}
	r.preAt = at
}

// forget drops the latest listing and the Gets once the kubelet has
// been asked nothing for keepListing, and returns the memory the burst
// used to the system.
func (r *podResources) forget() {
	r.mu.Lock()
	idle := (r.last != nil || len(r.gets) > 0) && !r.running && time.Since(r.used) >= keepListing
	if idle {
		r.last, r.gets = nil, nil
	}
	r.mu.Unlock()
	if idle {
		debug.FreeOSMemory()
	}
}

// errNotHeld says no container holds the devices (yet).
var errNotHeld = errors.New("no container holds these devices")
