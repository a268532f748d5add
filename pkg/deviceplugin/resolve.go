package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
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
}

// podResources asks the kubelet's PodResources API who holds devices.
// Callers share listings: one under way if it began late enough for
// them, else the next.
type podResources struct {
	client podresourcesapi.PodResourcesListerClient
	conn   *grpc.ClientConn
	logger klog.Logger

	mu sync.Mutex
	// current waits for the listing under way, begun at currentStarted;
	// waiting for the next one.
	current, waiting []chan *listing
	currentStarted   time.Time
	running          bool
	// last is the latest successful listing, dropped keepListing after
	// it was taken by the drop timer.
	last *listing
	drop *time.Timer
	// pre takes a listing prefetchAfter the latest Allocate.
	pre *time.Timer
}

// prefetchAfter is how long after the latest Allocate a listing is taken
// ahead of the containers' start: the kubelet records an allocation when
// Allocate returns, and containers start after a burst of admissions.
const prefetchAfter = 5 * time.Millisecond

type listing struct {
	resp *podresourcesapi.ListPodResourcesResponse
	err  error
	// started is when the listing was asked for.
	started time.Time

	// byFirst indexes the listed containers by resource and lowest
	// device ID, built on the first find: a burst of containers starting
	// at once each looks itself up in one listing.
	indexOnce sync.Once
	byFirst   map[string][]listed
}

// listed is a container of a listing.
type listed struct {
	pod *podresourcesapi.PodResources
	c   *podresourcesapi.ContainerResources
}

// dialPodResources connects to the kubelet's PodResources socket.
func dialPodResources(logger klog.Logger, socket string) (*podResources, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxListBytes)))
	if err != nil {
		return nil, fmt.Errorf("pod resources socket %s: %w", socket, err)
	}
	return &podResources{client: podresourcesapi.NewPodResourcesListerClient(conn), conn: conn, logger: logger}, nil
}

func (r *podResources) close() error {
	r.mu.Lock()
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
		l := &listing{started: time.Now()}
		r.current, r.waiting, r.currentStarted = r.waiting, nil, l.started
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		l.resp, l.err = r.client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
		cancel()
		r.mu.Lock()
		batch := r.current
		r.current = nil
		if l.err == nil {
			r.last = l
		}
		// Forget the latest listing keepListing from now; a forget that
		// ran while this listing was under way kept it.
		if r.drop == nil {
			r.drop = time.AfterFunc(keepListing, r.forget)
		} else {
			r.drop.Reset(keepListing)
		}
		r.mu.Unlock()
		r.logger.V(4).Info("Listed the kubelet's pod resources", "pods", len(l.resp.GetPodResources()),
			"callers", len(batch), "took", time.Since(l.started), "err", l.err)
		for _, ch := range batch {
			ch <- l
		}
	}
}

// prefetch takes a listing in the background prefetchAfter from now,
// later if called again meanwhile, so that containers starting after a
// burst of allocations find one ready. A listing that misses an
// allocation costs only its time: PreStartContainer then lists again.
func (r *podResources) prefetch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pre == nil {
		r.pre = time.AfterFunc(prefetchAfter, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, _ = r.list(ctx, time.Now())
		})
		return
	}
	r.pre.Reset(prefetchAfter)
}

// forget drops the latest listing once no container has started for
// keepListing, and returns the memory the burst used to the system.
func (r *podResources) forget() {
	r.mu.Lock()
	idle := r.last != nil && !r.running && time.Since(r.last.started) >= keepListing
	if idle {
		r.last = nil
	}
	r.mu.Unlock()
	if idle {
		debug.FreeOSMemory()
	}
}

// errNotHeld says no container holds the devices (yet).
var errNotHeld = errors.New("no container holds these devices")

// find returns the container that holds exactly ids of resource. App
// containers reuse the devices of init containers, and the listing leaves
// out init containers that are not sidecars, so devices a listed
// container holds more of belong to an init container of its pod: find
// returns that pod with Init set.
func (l *listing) find(resource string, ids []string) (holder, error) {
	if len(ids) == 0 {
		return holder{}, errors.New("no device IDs")
	}
	want := slices.Clone(ids)
	slices.Sort(want)
	l.indexOnce.Do(l.index)
	for _, x := range l.byFirst[resource+"\x00"+want[0]] {
		if held := heldOf(x.c, resource); slices.Equal(held, want) {
			return holder{Namespace: x.pod.GetNamespace(), Pod: x.pod.GetName(), Container: x.c.GetName()}, nil
		}
	}
	// Not one container's devices: look for a container holding them
	// among more (an init container's, reused).
	var within *holder
	for _, p := range l.resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			if !holds(c, resource, want[0]) {
				continue
			}
			if subset(want, heldOf(c, resource)) {
				within = &holder{Namespace: p.GetNamespace(), Pod: p.GetName(), Init: true}
			}
		}
	}
	if within != nil {
		return *within, nil
	}
	return holder{}, errNotHeld
}

// index fills byFirst: each container under its lowest device ID of
// each resource.
func (l *listing) index() {
	l.byFirst = make(map[string][]listed)
	for _, p := range l.resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			first := map[string]string{}
			for _, d := range c.GetDevices() {
				if len(d.GetDeviceIds()) == 0 {
					continue
				}
				id := slices.Min(d.GetDeviceIds())
				if f, ok := first[d.GetResourceName()]; !ok || id < f {
					first[d.GetResourceName()] = id
				}
			}
			for res, id := range first {
				k := res + "\x00" + id
				l.byFirst[k] = append(l.byFirst[k], listed{pod: p, c: c})
			}
		}
	}
}

// heldOf returns the device IDs of resource that c holds, sorted.
func heldOf(c *podresourcesapi.ContainerResources, resource string) []string {
	var held []string
	for _, d := range c.GetDevices() {
		if d.GetResourceName() == resource {
			held = append(held, d.GetDeviceIds()...)
		}
	}
	slices.Sort(held)
	return held
}

// holds reports whether c holds device id of resource.
func holds(c *podresourcesapi.ContainerResources, resource, id string) bool {
	for _, d := range c.GetDevices() {
		if d.GetResourceName() == resource && slices.Contains(d.GetDeviceIds(), id) {
			return true
		}
	}
	return false
}

// subset reports whether sorted a is within sorted b.
func subset(a, b []string) bool {
	i := 0
	for _, x := range b {
		if i < len(a) && a[i] == x {
			i++
		}
	}
	return i == len(a)
}
