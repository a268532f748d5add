package holder

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	specs "tags.cncf.io/container-device-interface/specs-go"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/podresources"
)

// PodGetter returns a pod by namespace and name (from an informer on the
// node's pods, or the apiserver).
type PodGetter func(ctx context.Context, namespace, name string) (*corev1.Pod, error)

// Kubelet is what the claims ask the kubelet's PodResources API
// (podresources.Client): listings and Gets shared by their start time.
type Kubelet interface {
	// Recent returns the latest listing if it was asked for after since.
	Recent(since time.Time) *podresources.Listing
	// Latest returns the latest listing kept, however old.
	Latest() *podresources.Listing
	// List returns a listing begun after since.
	List(ctx context.Context, since time.Time) (*podresources.Listing, error)
	// Get returns a Get of one pod begun after since.
	Get(namespace, name string, since time.Time) *podresources.Get
	// FromGets looks for the container holding exactly ids among the
	// kept Gets begun after since.
	FromGets(resource string, ids []string, since time.Time) (podresources.Holder, bool)
	// Held reports whether a kept Get shows the pod holding resource.
	Held(resource, namespace, name string) bool
}

// Config configures the claims of one node.
type Config struct {
	// Node is this node's name: records for other nodes are refused.
	Node string
	// CDIDir is where CDI specs are written (e.g. /var/run/cdi).
	CDIDir  string
	Kubelet Kubelet
	Pods    PodGetter
	// Served returns the resources the device plugins serve: the
	// prefetch asks about the pods that ask for them.
	Served func() []string
	// MPSResources are the resources of kind MPS: a container that asks
	// for one is an MPS client.
	MPSResources []corev1.ResourceName
	// NodePods, if set, returns the pods bound to this node (from an
	// informer). A container that the latest PodResources listing does
	// not show is then looked for among the few pods that listing does
	// not show, one pod at a time (PodResources Get), before the node is
	// listed again.
	NodePods func() []*corev1.Pod
	// Requests, if set, translates a pod's spec into what it asks of
	// GPUs: a record that gives a container more (or other) than that is
	// refused, whoever wrote it.
	Requests func(*corev1.Pod) (*alloc.PodRequest, error)
	// RequestAnnotations, if set, gives the annotations that shape a
	// pod's request (resource.Model's RequestAnnotations): a pod whose
	// record keeps other values for them (gpusharev1.Asked) was edited
	// after binding, and its containers are refused.
	RequestAnnotations []string
	// Mode and ReservedMiB describe the node's GPUs as its inventory
	// publishes them (inventory.From, inventory.Reserve; with MPS set its
	// GPUs run MPS), which the scheduler places records on: a record is
	// checked against the same. ReservedMiB nil reserves nothing.
	Mode        gpusharev1.Mode
	ReservedMiB func(model string) int64
	// UnitMiB, if set, gives the MiB in one unit of a Memory resource for
	// pods in a namespace (0 if not one): containers that ask
	// aliyun.com/gpu-mem then get Aliyun's environment in their pod's
	// unit (aliyunEnv).
	UnitMiB func(name corev1.ResourceName, namespace string) int64
	// MPS, if set, gives containers that ask for MPS the MPS client
	// environment and mounts.
	MPS *cdi.MPS
	// Enforcement is what holds the containers that share a GPU to their
	// shares (enforcedBy): with EnforcementMPS each is an MPS client (MPS
	// must be set), with EnforcementHAMiCore HAMi-core holds it (HAMiCore
	// must be set).
	Enforcement gpusharev1.Enforcement
	HAMiCore    *cdi.HAMiCore
	// ClaimsBeside, if set, returns an error when uuids, the GPUs a
	// container of pod is given by its record as it starts, would hold
	// more than they have with the ResourceClaims prepared on this node
	// and what the node's pods book, pod's record included
	// (dra.Preparer.Beside): the container is refused. The claims were
	// prepared first, before the record reached the node. gpus are the
	// node's GPUs, as SetGPUs last gave them.
	ClaimsBeside func(pod *corev1.Pod, uuids []string, gpus []gpu.Device) error
	// Clock is the real clock if nil.
	Clock clock.WithDelayedExecution
}

// Resolver holds the claims Allocate named on one node, resolved ahead by
// the prefetch or when their containers start.
type Resolver struct {
	cfg    Config
	logger klog.Logger
	clock  clock.WithDelayedExecution

	mu   sync.Mutex
	gpus map[string]gpu.Device
	// pending are the claims Allocate named whose containers have not
	// started, so that Resolve may use a PodResources answer asked for
	// since, and the prefetch may resolve them ahead.
	pending map[string]*pending
	// retries counts the prefetches since the latest Allocate.
	retries int
	// due is set while a prefetch is scheduled and has not begun;
	// fetching while a prefetch runs; fetchAgain when another was due
	// meanwhile, and it runs once that one is done.
	due, fetching, fetchAgain bool
	// changed is closed, and replaced, whenever due, fetching or a
	// claim's readiness changes: who waits for the prefetch to settle
	// waits on it.
	changed chan struct{}
	// pre calls fetch (prefetch) after (prefetchAfter) an Allocate, at
	// preAt.
	fetch func()
	pre   clock.Timer
	preAt time.Time
	after time.Duration
	// closed is set by Close: no more prefetches.
	closed bool
}

// New returns the claims of a node with cfg.
func New(logger klog.Logger, cfg Config) (*Resolver, error) {
	if cfg.Node == "" || cfg.CDIDir == "" || cfg.Kubelet == nil || cfg.Pods == nil || cfg.Served == nil {
		return nil, errors.New("claims: node, CDI directory, kubelet, pod getter and served resources are required")
	}
	if err := os.MkdirAll(cfg.CDIDir, 0o755); err != nil { //nolint:gosec // the runtime reads CDI specs
		return nil, fmt.Errorf("claims: %w", err)
	}
	c := &Resolver{cfg: cfg, logger: logger, clock: cfg.Clock, pending: map[string]*pending{}, after: prefetchAfter}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	c.fetch = c.prefetch
	c.changed = make(chan struct{})
	return c, nil
}

// notify tells who waits on c.changed that the prefetch's state changed
// (c.mu held).
func (c *Resolver) notify() {
	if c.changed != nil {
		close(c.changed)
	}
	c.changed = make(chan struct{})
}

// Close stops the prefetches.
func (c *Resolver) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.pre != nil {
		c.pre.Stop()
	}
}

// SetGPUs sets the node's GPUs as last read: records are checked against
// them.
func (c *Resolver) SetGPUs(devs []gpu.Device) {
	byUUID := make(map[string]gpu.Device, len(devs))
	for _, d := range devs {
		byUUID[d.UUID] = d
	}
	c.mu.Lock()
	c.gpus = byUUID
	c.mu.Unlock()
}

// deviceNodes maps the node's GPUs' UUIDs to their device nodes.
func (c *Resolver) deviceNodes() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes := make(map[string]string, len(c.gpus))
	for uuid, d := range c.gpus {
		if d.DeviceNode != "" {
			nodes[uuid] = d.DeviceNode
		}
	}
	return nodes
}

// pending is a claim that Allocate named and whose container has not
// started yet.
type pending struct {
	// allocated is when Allocate named it.
	allocated time.Time
	// ready, once set, is the container that holds the claim's devices
	// and its allocation, found in a kubelet answer asked for after
	// allocated; the claim's CDI spec is written. A new Allocate of the
	// same claim replaces the pending claim, and ready with it.
	ready *resolved
	// tried is set once resolving it ahead failed (an init container
	// asks for the resource, a bad record): it is resolved when its
	// container starts, and the prefetch does not try again for it.
	tried bool
}

// resolved is a container and its allocation.
type resolved struct {
	podresources.Holder
	alloc *gpusharev1.ContainerAllocation
	// pod is the pod whose record alloc is from.
	pod *corev1.Pod
	// hooked is set for devices that defer to their container's hooks
	// (hookedOnly): their CDI device carries cdi.HookedEdits.
	hooked bool
	// env is given besides the allocation's own (aliyunEnv).
	env []string
	// mps is set for a container that runs as an MPS client
	// (enforcedBy): only it gets the node's MPS client edits.
	mps bool
	// hamiCore is set for a container HAMi-core holds to its share.
	hamiCore bool
}

// hookedOnly is the resolution of devices that defer to the hooks of
// their container h (defers): their CDI device carries cdi.HookedEdits,
// whichever of the pod's containers they are (they may not tell an init
// container from the app container that reuses its devices). The hooks'
// own claim checks the record and the GPUs.
func hookedOnly(h podresources.Holder) *resolved {
	return &resolved{Holder: h, alloc: &gpusharev1.ContainerAllocation{}, hooked: true}
}

// edits are what the claim's CDI device gives the container: the node's
// MPS client edits (mps, nil without MPS) only if it runs as an MPS
// client, HAMi-core's (hc) only if HAMi-core holds it, and its GPUs'
// device nodes (by UUID).
func (r *resolved) edits(claim string, mps *cdi.MPS, hc *cdi.HAMiCore, nodes map[string]string) specs.ContainerEdits {
	if r.hooked {
		return cdi.HookedEdits()
	}
	if !r.mps {
		mps = nil
	}
	e := cdi.GPUEdits(r.alloc, mps, nodes)
	e.Env = append(e.Env, r.env...)
	if r.hamiCore && hc != nil {
		h := hc.Edits(r.alloc, claim)
		e.Env, e.Mounts = append(e.Env, h.Env...), append(e.Mounts, h.Mounts...)
	}
	return e
}

// forgetClaimsAfter is how long a claim whose container never starts is
// kept.
const forgetClaimsAfter = 10 * time.Minute

// Allocated records that Allocate named claim now, and prefetches what
// its container will need.
func (c *Resolver) Allocated(claim string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.pending[claim] = &pending{allocated: now}
	c.retries = 0
	c.schedule(0)
	for k, p := range c.pending {
		if now.Sub(p.allocated) > forgetClaimsAfter {
			delete(c.pending, k)
		}
	}
}

// allocatedAt returns when Allocate named claim, or otherwise if it did
// not (before the daemon started, or long ago).
func (c *Resolver) allocatedAt(claim string, otherwise time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pending[claim]; p != nil {
		return p.allocated
	}
	return otherwise
}

// forget drops claim: its container was found.
func (c *Resolver) forget(claim string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, claim)
}

// takeReady returns the container of claim if it was resolved ahead, and
// drops the claim.
func (c *Resolver) takeReady(claim string) *resolved {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[claim]
	if p == nil || p.ready == nil {
		return nil
	}
	delete(c.pending, claim)
	return p.ready
}

// Resolve returns the container that holds ids of resource and its
// allocation, with the CDI spec of claim written, and how it was found:
// resolved ahead by the prefetch ("ahead"), or now ("now"). A container
// resolved ahead is checked again against the GPUs' health.
func (c *Resolver) Resolve(ctx context.Context, resource, claim string, ids []string) (podresources.Holder, *gpusharev1.ContainerAllocation, string, error) {
	if r := c.takeReady(claim); r != nil {
		err := c.checkGPUs(r.Holder, r.alloc)
		if err == nil {
			err = c.beside(r)
		}
		return r.Holder, r.alloc, "ahead", err
	}
	r, err := c.resolve(ctx, resource, claim, ids)
	if err == nil {
		err = c.beside(r)
	}
	if err != nil {
		return r.Holder, nil, "", err
	}
	// resolve dropped the claim: one there now was named by a newer
	// Allocate, for another container (this one's pod gone), and may be
	// resolved ahead already. Its spec must not be overwritten.
	if err := c.writeSpec(claim, r, nil); err != nil {
		return r.Holder, nil, "", errWriting(r.Holder, err)
	}
	return r.Holder, r.alloc, "now", nil
}

// beside checks r's GPUs against the ResourceClaims prepared on this
// node (Config.ClaimsBeside), as its container starts.
func (c *Resolver) beside(r *resolved) error {
	if c.cfg.ClaimsBeside == nil || r.alloc == nil || r.pod == nil {
		return nil
	}
	uuids := make([]string, len(r.alloc.GPUs))
	for i, g := range r.alloc.GPUs {
		uuids[i] = g.UUID
	}
	c.mu.Lock()
	gpus := slices.Collect(maps.Values(c.gpus))
	c.mu.Unlock()
	if err := c.cfg.ClaimsBeside(r.pod, uuids, gpus); err != nil {
		return fmt.Errorf("pod %s/%s container %s: %w", r.Namespace, r.Pod, r.Container, err)
	}
	return nil
}

// writeSpec writes the CDI spec of claim for r: it stages the spec, and
// renames it into place under c.mu, where the sweep removes specs, only
// while the claim's pending entry is still want (nil: none). Else a newer
// Allocate named the claim, for another container, and errReplaced says
// so.
func (c *Resolver) writeSpec(claim string, r *resolved, want *pending) error {
	tmp, err := cdi.Stage(c.cfg.CDIDir, claim, r.edits(claim, c.cfg.MPS, c.cfg.HAMiCore, c.deviceNodes()))
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.pending[claim] != want {
		err = errReplaced
	} else {
		err = os.Rename(tmp, cdi.SpecPath(c.cfg.CDIDir, claim))
	}
	c.mu.Unlock()
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// errWriting says the CDI spec of h could not be written.
func errWriting(h podresources.Holder, err error) error {
	return fmt.Errorf("writing the CDI spec of container %s of pod %s/%s: %w", h.Container, h.Namespace, h.Pod, err)
}

// Held returns the claims that containers hold in a PodResources listing
// begun now or later (cdi.Claims).
func (c *Resolver) Held(ctx context.Context) (map[string]bool, error) {
	l, err := c.cfg.Kubelet.List(ctx, c.clock.Now())
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	l.Each(func(_ podresources.Holder, resource string, ids []string) {
		held[cdi.ClaimOf(resource, ids)] = true
	})
	return held, nil
}

// WithPending calls fn under the lock that spec writes are renamed into
// place under, with pending reporting whether Allocate named claim and
// its container has not started (cdi.Claims).
func (c *Resolver) WithPending(fn func(pending func(claim string) bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(func(claim string) bool { return c.pending[claim] != nil })
}
