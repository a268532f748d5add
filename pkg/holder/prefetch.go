package holder

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/podresources"
	"github.com/gpushare/gpushare/pkg/resource"
)

// prefetchAfter is how long after an Allocate the daemon asks the
// kubelet, ahead of the containers' start: the kubelet records an
// allocation when Allocate returns. During a burst of admissions it asks
// every prefetchAfter, not only after the burst: where admissions are
// quick (few devices, such as hooks), containers start right after.
const prefetchAfter = 5 * time.Millisecond

// schedule runs the prefetch in the background prefetchAfter from now,
// or sooner if it is due sooner already: during a burst of allocations
// it runs every prefetchAfter, so that containers starting right after
// the burst find what they need ready. Its retry (0 for the first try)
// doubles the delay with each retry. c.mu is held.
func (c *Resolver) schedule(retry int) {
	if c.closed {
		return
	}
	after := c.after << retry
	now := c.clock.Now()
	at := now.Add(after)
	switch {
	case c.pre == nil:
		c.pre = c.clock.AfterFunc(after, c.fetch)
	case c.preAt.After(now) && !c.preAt.After(at):
		return // due sooner
	default:
		c.pre.Reset(after)
	}
	c.preAt = at
	c.due = true
	c.notify()
}

// maxGets bounds the pods asked about one at a time for a container;
// past it, the node is listed.
const maxGets = 16

// prefetch readies what the containers allocated last need to start, and
// resolves those it finds ahead of their start (fetchAhead, prepare). The
// kubelet records an allocation after Allocate returns, and makes the pod
// active after admitting it, so a prefetch can come too early: it tries
// again, later each time, while a claim named before it has no container.
// Prefetches run one at a time: one due while another runs (a burst of
// Allocates) runs right after it.
func (c *Resolver) prefetch() {
	c.mu.Lock()
	if !c.preAt.After(c.clock.Now()) {
		// Begun, and not scheduled again since.
		c.due = false
	}
	c.notify()
	if c.fetching {
		// One at a time: the one under way runs again when done.
		c.fetchAgain = true
		c.mu.Unlock()
		return
	}
	c.fetching = true
	c.mu.Unlock()
	for {
		now := c.clock.Now()
		c.mu.Lock()
		retry := c.retries
		c.mu.Unlock()
		c.fetchAhead(now, retry)
		c.mu.Lock()
		if c.fetchAgain {
			c.fetchAgain = false
			c.mu.Unlock()
			continue
		}
		c.fetching = false
		if c.retries < maxPrefetchRetries && c.waitingLocked(now) {
			c.retries++
			c.schedule(c.retries)
		}
		c.notify()
		c.mu.Unlock()
		return
	}
}

// maxPrefetchRetries bounds the prefetches after an Allocate: the delay
// doubles with each, 5 ms to 160 ms.
const maxPrefetchRetries = 5

// fetchAhead asks the kubelet what the containers allocated before now
// need to start. The kubelet admits pods oldest first, so those allocated
// last are the oldest pods that neither the latest listing nor a Get
// shows holding devices yet. It Gets the oldest such pod, then twice as
// many at a time while every pod it got held devices, and stops at the
// first batch with a pod that does not. When the very first misses on
// the third try (retry 2, 15 ms after the first), not too early then, the
// kubelet's order was not the one guessed, and it Gets up to maxGets more
// at once. Past maxPrefetched pods, or without the node's pods at hand, it
// lists the node instead.
func (c *Resolver) fetchAhead(now time.Time, retry int) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resources := c.cfg.Served()
	asked := map[string]bool{}
	for batch := 1; len(asked) < maxPrefetched; {
		pods, _, ok := c.unshown(c.cfg.Kubelet.Latest(), asked, resources...)
		if !ok {
			break
		}
		pods = pods[:min(len(pods), batch)]
		if len(pods) == 0 {
			return
		}
		gets := make([]*podresources.Get, len(pods))
		for i, p := range pods {
			asked[p.Namespace+"/"+p.Name] = true
			gets[i] = c.cfg.Kubelet.Get(p.Namespace, p.Name, now)
		}
		holding := 0
		for i, g := range gets {
			<-g.Done()
			l, err := g.Result()
			if err == nil && slices.ContainsFunc(resources, func(r string) bool { return l.Shows(r, pods[i].Namespace, pods[i].Name) }) {
				holding++
				c.prepare(ctx, l)
			}
		}
		switch {
		case holding == len(pods):
			// More may be admitted.
			batch = min(2*batch, maxGets)
		case len(asked) == 1 && retry < 2:
			// Too early, or not the oldest: the next try tells.
			return
		case len(asked) == 1:
			// Not the oldest: the kubelet went by another order.
			batch = maxGets
		default:
			// The pods after these are not admitted yet.
			return
		}
	}
	if l, err := c.cfg.Kubelet.List(ctx, now); err == nil {
		c.prepare(ctx, l)
	}
}

// maxPrefetched bounds the pods a prefetch asks about one at a time; past
// it, the node is listed.
const maxPrefetched = 4 * maxGets

// unshown returns the oldest maxGets of this node's pods, not in skip
// (by namespace/name), that ask for one of resources and that neither
// listing l (if any) nor a kept Get shows holding it; and whether those
// are all of them. It reports false when the node's pods are not at hand.
func (c *Resolver) unshown(l *podresources.Listing, skip map[string]bool, resources ...string) (oldest []*corev1.Pod, all, ok bool) {
	if c.cfg.NodePods == nil {
		return nil, false, false
	}
	var pods []*corev1.Pod
	for _, p := range c.cfg.NodePods() {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || skip[p.Namespace+"/"+p.Name] {
			continue
		}
		if slices.ContainsFunc(resources, func(r string) bool {
			return resource.Asks(p, corev1.ResourceName(r)) && (l == nil || !l.Shows(r, p.Namespace, p.Name)) && !c.cfg.Kubelet.Held(r, p.Namespace, p.Name)
		}) {
			pods = append(pods, p)
		}
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		if d := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); d != 0 {
			return d
		}
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return pods[:min(len(pods), maxGets)], len(pods) <= maxGets, true
}

// prepare resolves ahead the containers that answer l shows holding
// devices of claims that Allocate named before l was asked for, and
// writes their CDI specs, so that they start without a call to the
// kubelet or a write. It passes over pods whose init containers ask for
// the resource (which container a claim is depends then on what has
// finished when it starts) and containers whose record does not check
// out: those are resolved when they start, and fail then with the reason.
func (c *Resolver) prepare(ctx context.Context, l *podresources.Listing) {
	if l == nil || !c.waiting(l.Started()) {
		return
	}
	l.Each(func(h podresources.Holder, res string, ids []string) {
		if len(ids) == 0 {
			return
		}
		claim := cdi.ClaimOf(res, ids)
		c.mu.Lock()
		p := c.pending[claim]
		todo := p != nil && p.ready == nil && p.allocated.Before(l.Started())
		c.mu.Unlock()
		if !todo {
			return
		}
		if err := c.prepareOne(ctx, p, claim, h, res); err != nil {
			c.mu.Lock()
			p.tried = true
			c.mu.Unlock()
			c.logger.V(4).Info("Not resolving a container ahead", "pod", klog.KRef(h.Namespace, h.Pod), "container", h.Container,
				"resource", res, "reason", err)
		}
	})
}

// waiting reports whether a claim named before t has no container yet,
// and resolving it ahead was not tried.
func (c *Resolver) waiting(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitingLocked(t)
}

// waitingLocked is waiting, with c.mu held.
func (c *Resolver) waitingLocked(t time.Time) bool {
	for _, p := range c.pending {
		if p.ready == nil && !p.tried && p.allocated.Before(t) {
			return true
		}
	}
	return false
}

// prepareOne resolves pending claim p to container h ahead of its start
// and writes its spec.
func (c *Resolver) prepareOne(ctx context.Context, p *pending, claim string, h podresources.Holder, res string) error {
	r, err := c.ahead(ctx, h, res)
	if err != nil {
		return err
	}
	// Only while p is still the claim's: a spec for a container that has
	// been replaced must not land after the new container's own.
	if err := c.writeSpec(claim, r, p); err != nil {
		return err
	}
	c.mu.Lock()
	p.ready = r
	c.notify()
	c.mu.Unlock()
	return nil
}

// ahead resolves the devices of resource that container h holds, ahead
// of its start.
func (c *Resolver) ahead(ctx context.Context, h podresources.Holder, res string) (*resolved, error) {
	if defers(h, res) {
		return hookedOnly(h), nil
	}
	pod, err := c.cfg.Pods(ctx, h.Namespace, h.Pod)
	if err != nil {
		return nil, err
	}
	switch {
	case pod.DeletionTimestamp != nil:
		// Perhaps a pod of the same name gone, as the informer has
		// not seen yet, and not the one the kubelet admitted.
		return nil, errDeleting
	case resource.InitAsks(pod, corev1.ResourceName(res)):
		return nil, errInitContainers
	}
	a, err := c.allocation(pod, h.Container)
	if err != nil {
		return nil, err
	}
	if err := c.checkGPUs(h, a); err != nil {
		return nil, err
	}
	r := &resolved{Holder: h, alloc: a, pod: pod, env: c.aliyunEnvOf(pod, h.Container, a)}
	r.mps, r.hamiCore = c.enforcedBy(pod, h.Container, a)
	return r, nil
}
