package deviceplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// Config configures the device plugins of one node.
type Config struct {
	// Node is this node's name: records for other nodes are refused.
	Node string
	// Dir is the kubelet's device plugin directory (kubelet.sock is in
	// it); the plugins' sockets go there too.
	Dir string
	// PodResourcesSocket is the kubelet's PodResources socket.
	PodResourcesSocket string
	// CDIDir is where CDI specs are written (e.g. /var/run/cdi).
	CDIDir string
	// Resources are served, one plugin each.
	Resources []Resource
	Backend   gpu.Backend
	Pods      PodGetter
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
	// UnitMiB, if set, gives the MiB in one unit of a Memory resource for
	// pods in a namespace (0 if not one): containers that ask
	// aliyun.com/gpu-mem then get Aliyun's environment in their pod's
	// unit (aliyunEnv).
	UnitMiB func(name corev1.ResourceName, namespace string) int64
	// MPS, if set, gives containers that ask for MPS (a resource of
	// kind MPS) the MPS client environment and mounts.
	MPS *MPS
	// SlotsPerGPU and MaxDevices; DefaultSlotsPerGPU and
	// DefaultMaxDevices if 0.
	SlotsPerGPU, MaxDevices int
	// HookDevices is how many devices the hook resource
	// (gpusharev1.HookResource) has, served besides Resources:
	// DefaultHookDevices if 0, none if negative.
	HookDevices int
	// Observe, if set, is told how long each Allocate and
	// PreStartContainer call took ("Allocate", "PreStartContainer").
	Observe func(method string, took time.Duration)
}

func (c *Config) sizing() sizing {
	return sizing{slots: c.SlotsPerGPU, hooks: c.HookDevices, maxDevices: c.MaxDevices}
}

// Manager runs a plugin for each resource and keeps them registered.
type Manager struct {
	cfg     Config
	logger  klog.Logger
	pr      *podResources
	plugins []*plugin
	// skipped says why a resource is not served.
	skipped map[string]error

	mu   sync.Mutex
	gpus map[string]gpu.Device
	// cancelRegister ends the registration goroutines of the last
	// restart; registering waits for them.
	cancelRegister context.CancelFunc
	registering    sync.WaitGroup
	// registered is closed once every plugin has registered with the
	// kubelet; unregistered counts those that have not yet.
	registered   chan struct{}
	unregistered int
	// claims are the claims Allocate named whose containers have not
	// started, so that PreStartContainer may use a PodResources answer
	// asked for since, and the prefetch may resolve them ahead.
	claims map[string]*pending
	// retries counts the prefetches since the latest Allocate.
	retries int
	// fetching is set while a prefetch runs; fetchAgain when another
	// was due meanwhile, and it runs once that one is done.
	fetching, fetchAgain bool
}

// New checks cfg, discovers the GPUs and builds the plugins.
func New(logger klog.Logger, cfg Config) (*Manager, error) {
	if cfg.Node == "" || cfg.Dir == "" || cfg.PodResourcesSocket == "" || cfg.CDIDir == "" || cfg.Backend == nil || cfg.Pods == nil {
		return nil, errors.New("device plugin: node, plugin directory, pod resources socket, CDI directory, GPU backend and pod getter are required")
	}
	if cfg.SlotsPerGPU == 0 {
		cfg.SlotsPerGPU = DefaultSlotsPerGPU
	}
	if cfg.MaxDevices == 0 {
		cfg.MaxDevices = DefaultMaxDevices
	}
	switch {
	case cfg.HookDevices == 0:
		cfg.HookDevices = DefaultHookDevices
	case cfg.HookDevices > 0:
	default:
		cfg.HookDevices = 0
	}
	if err := os.MkdirAll(cfg.CDIDir, 0o755); err != nil { //nolint:gosec // the runtime reads CDI specs
		return nil, err
	}
	m := &Manager{cfg: cfg, logger: logger, skipped: map[string]error{}, claims: map[string]*pending{}, registered: make(chan struct{})}
	devs, err := cfg.Backend.Devices()
	if err != nil {
		return nil, fmt.Errorf("discovering GPUs: %w", err)
	}
	m.setGPUs(devs)
	resources := cfg.Resources
	if cfg.HookDevices > 0 {
		// First: pods that ask for hooks need them registered.
		resources = append([]Resource{hook()}, resources...)
	}
	for _, r := range resources {
		n, err := r.count(devs, cfg.sizing())
		if err != nil {
			m.skipped[string(r.Name)] = err
			logger.Info("Not serving resource", "resource", r.Name, "reason", err)
			continue
		}
		socket := filepath.Join(cfg.Dir, "gpushare-"+strings.NewReplacer("/", "-", ".", "-").Replace(string(r.Name))+".sock")
		p := &plugin{res: r, socket: socket, m: m, logger: logger.WithValues("resource", r.Name),
			gpus: devs, count: n, updates: make(chan struct{})}
		m.plugins = append(m.plugins, p)
	}
	m.unregistered = len(m.plugins)
	if m.unregistered == 0 {
		close(m.registered)
	}
	if m.pr, err = dialPodResources(logger, cfg.PodResourcesSocket); err != nil {
		return nil, err
	}
	return m, nil
}

// Skipped returns the resources not served and why.
func (m *Manager) Skipped() map[string]error { return m.skipped }

func (m *Manager) setGPUs(devs []gpu.Device) {
	byUUID := make(map[string]gpu.Device, len(devs))
	for _, d := range devs {
		byUUID[d.UUID] = d
	}
	m.mu.Lock()
	m.gpus = byUUID
	m.mu.Unlock()
}

// Run serves and registers the plugins, registers them again whenever the
// kubelet restarts (its socket is created anew), passes GPU health
// changes on and removes unused CDI specs, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	defer func() { _ = m.pr.close() }()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(m.cfg.Dir); err != nil {
		return fmt.Errorf("watching %s: %w", m.cfg.Dir, err)
	}
	kubelet := filepath.Join(m.cfg.Dir, filepath.Base(pluginapi.KubeletSocket))
	m.restart(ctx, kubelet)
	defer func() {
		m.cancelRegister()
		m.registering.Wait()
		m.stop()
	}()

	sweepCtx, stopSweeping := context.WithCancel(ctx)
	var sweeping sync.WaitGroup
	defer func() {
		stopSweeping()
		sweeping.Wait()
	}()
	sweeping.Go(func() { m.sweepEvery(sweepCtx, sweepSpecsEvery) })

	events := make(chan gpu.Event, 16)
	watchErr := make(chan error, 1)
	go func() { watchErr <- m.cfg.Backend.Watch(ctx, events) }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-watchErr:
			if err != nil {
				return fmt.Errorf("watching GPU health: %w", err)
			}
		case ev := <-events:
			m.logger.Info("GPU health changed", "uuid", ev.UUID, "healthy", ev.Healthy, "reason", ev.Reason)
			m.refresh()
		case ev := <-w.Events:
			if ev.Name == kubelet && ev.Op.Has(fsnotify.Create) {
				m.logger.Info("Kubelet restarted; registering again")
				m.restart(ctx, kubelet)
			}
		case err := <-w.Errors:
			m.logger.Error(err, "Watching the device plugin directory")
		}
	}
}

// restart stops the plugins' servers (the kubelet removed their sockets),
// then serves and registers each again, each in its own goroutine that
// keeps trying until it succeeds or the next restart. Old servers stop
// first: a new registration followed by the old stream's end would
// disconnect the new.
func (m *Manager) restart(ctx context.Context, kubelet string) {
	if m.cancelRegister != nil {
		m.cancelRegister()
		m.registering.Wait()
	}
	m.stop()
	ctx, m.cancelRegister = context.WithCancel(ctx)
	if _, err := os.Stat(kubelet); err != nil {
		m.logger.Info("Waiting for the kubelet", "socket", kubelet)
		return
	}
	for _, p := range m.plugins {
		m.registering.Go(func() { m.register(ctx, p, kubelet) })
	}
}

// register serves p and registers it with the kubelet, trying again with
// a growing pause (the kubelet may create its socket a moment before it
// accepts, or be slow to answer) until it succeeds or ctx ends.
func (m *Manager) register(ctx context.Context, p *plugin, kubelet string) {
	for try := 0; ; try++ {
		p.stop()
		err := p.serve()
		if err == nil {
			if err = p.register(ctx, kubelet); err == nil {
				m.logger.Info("Registered device plugin", "resource", p.res.Name, "devices", p.devices())
				m.noteRegistered(p)
				return
			}
		}
		if try > 0 {
			m.logger.Error(err, "Registering device plugin; trying again", "resource", p.res.Name, "attempt", try+1)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Duration(try+1)*200*time.Millisecond, 5*time.Second)):
		}
	}
}

// Registered is closed once every plugin has registered with the kubelet
// (the first time). Until then the kubelet admits pods without counting
// or allocating the resources not registered yet (it leaves out those the
// node does not advertise), so the node should not take GPU pods: the
// daemon publishes the node's GPUs only then.
func (m *Manager) Registered() <-chan struct{} { return m.registered }

// noteRegistered counts p's first registration.
func (m *Manager) noteRegistered(p *plugin) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.registeredOnce {
		return
	}
	p.registeredOnce = true
	if m.unregistered--; m.unregistered == 0 {
		close(m.registered)
	}
}

func (m *Manager) stop() {
	for _, p := range m.plugins {
		p.stop()
	}
}

// refresh reads the GPUs again and updates every plugin's devices.
func (m *Manager) refresh() {
	devs, err := m.cfg.Backend.Devices()
	if err != nil {
		m.logger.Error(err, "Reading GPUs")
		return
	}
	m.setGPUs(devs)
	for _, p := range m.plugins {
		n, err := p.res.count(devs, m.cfg.sizing())
		if err != nil {
			m.logger.Error(err, "Updating devices", "resource", p.res.Name)
			continue
		}
		p.setGPUs(devs, n)
	}
}

func (m *Manager) observe(method string, start time.Time) {
	if m.cfg.Observe != nil {
		m.cfg.Observe(method, time.Since(start))
	}
}

// holderOf finds the container that holds ids. A PodResources listing
// asked for after Allocate named the claim serves many containers
// starting at once. When the latest does not show the IDs, the few pods
// it does not show are asked about (ask); failing that, a listing is
// taken: the one under way if it began after Allocate, else the next,
// and one begun after this call if that misses them too (the kubelet
// records an allocation when Allocate returns).
func (m *Manager) holderOf(ctx context.Context, resource, claim string, ids []string) (holder, error) {
	called := time.Now()
	since := m.allocatedAt(claim, called)
	found := func(h holder, via string) (holder, error) {
		m.logger.V(4).Info("Found the container holding devices", "pod", klog.KRef(h.Namespace, h.Pod),
			"resource", resource, "via", via, "took", time.Since(called))
		return h, nil
	}
	if l := m.pr.recent(since); l != nil {
		if h, err := l.find(resource, ids); err == nil {
			return found(h, "listing")
		}
	}
	if h, ok := m.pr.fromGets(resource, ids, since); ok {
		return found(h, "prefetched pod")
	}
	if h, ok := m.ask(ctx, resource, ids, since); ok {
		return found(h, "pod")
	}
	for {
		l, err := m.pr.list(ctx, since)
		if err != nil {
			return holder{}, fmt.Errorf("asking the kubelet which container holds %d %s devices: %w", len(ids), resource, err)
		}
		h, err := l.find(resource, ids)
		if err == nil {
			return found(h, "new listing")
		}
		if !errors.Is(err, errNotHeld) || !l.started.Before(called) {
			return h, err
		}
		since = called
	}
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
func (m *Manager) prefetch() {
	m.mu.Lock()
	if m.fetching {
		// One at a time: the one under way runs again when done.
		m.fetchAgain = true
		m.mu.Unlock()
		return
	}
	m.fetching = true
	m.mu.Unlock()
	for {
		now := time.Now()
		m.mu.Lock()
		retry := m.retries
		m.mu.Unlock()
		m.fetchAhead(now, retry)
		m.mu.Lock()
		if m.fetchAgain {
			m.fetchAgain = false
			m.mu.Unlock()
			continue
		}
		m.fetching = false
		if m.retries < maxPrefetchRetries && m.waitingLocked(now) {
			m.retries++
			m.pr.prefetch(m.prefetch, m.retries)
		}
		m.mu.Unlock()
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
func (m *Manager) fetchAhead(now time.Time, retry int) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resources := m.served()
	asked := map[string]bool{}
	for batch := 1; len(asked) < maxPrefetched; {
		pods, _, ok := m.unshown(m.pr.latest(), asked, resources...)
		if !ok {
			break
		}
		pods = pods[:min(len(pods), batch)]
		if len(pods) == 0 {
			return
		}
		gets := make([]*podGet, len(pods))
		for i, p := range pods {
			asked[p.Namespace+"/"+p.Name] = true
			gets[i] = m.pr.get(p.Namespace, p.Name, now)
		}
		holding := 0
		for i, g := range gets {
			<-g.done
			if g.err == nil && slices.ContainsFunc(resources, func(r string) bool { return g.l.shows(r, pods[i].Namespace, pods[i].Name) }) {
				holding++
				m.prepare(ctx, g.l)
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
	if l, err := m.pr.list(ctx, now); err == nil {
		m.prepare(ctx, l)
	}
}

// maxPrefetched bounds the pods a prefetch asks about one at a time; past
// it, the node is listed.
const maxPrefetched = 4 * maxGets

// served are the resources the plugins serve.
func (m *Manager) served() []string {
	var out []string
	for _, p := range m.plugins {
		out = append(out, string(p.res.Name))
	}
	return out
}

// unshown returns the oldest maxGets of this node's pods, not in skip
// (by namespace/name), that ask for one of resources and that neither
// listing l (if any) nor a kept Get shows holding it; and whether those
// are all of them. It reports false when the node's pods are not at hand.
func (m *Manager) unshown(l *listing, skip map[string]bool, resources ...string) (oldest []*corev1.Pod, all, ok bool) {
	if m.cfg.NodePods == nil {
		return nil, false, false
	}
	var pods []*corev1.Pod
	for _, p := range m.cfg.NodePods() {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || skip[p.Namespace+"/"+p.Name] {
			continue
		}
		if slices.ContainsFunc(resources, func(r string) bool {
			return asks(p, r) && (l == nil || !l.shows(r, p.Namespace, p.Name)) && !m.pr.held(r, p.Namespace, p.Name)
		}) {
			pods = append(pods, p)
		}
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return pods[:min(len(pods), maxGets)], len(pods) <= maxGets, true
}

// ask looks for the container holding exactly ids among this node's pods
// that ask for resource and that the latest listing does not show holding
// it, when there are at most maxGets: a PodResources Get of each, begun
// after since (a prefetched one, or a new one). Those are the pods
// admitted since the latest listing began, the last of a burst. It
// reports false when they are more, when the kubelet does not serve Get,
// or when none holds exactly ids (an init container's devices that its
// app container reuses): the node is listed then.
func (m *Manager) ask(ctx context.Context, resource string, ids []string, since time.Time) (holder, bool) {
	pods, all, ok := m.unshown(m.pr.latest(), nil, resource)
	if !ok || !all {
		return holder{}, false
	}
	gets := make([]*podGet, len(pods))
	for i, p := range pods {
		gets[i] = m.pr.get(p.Namespace, p.Name, since)
	}
	for i, g := range gets {
		select {
		case <-g.done:
		case <-ctx.Done():
			return holder{}, false
		}
		if g.err != nil {
			m.logger.V(4).Info("Asking the kubelet about a pod", "pod", klog.KObj(pods[i]), "err", g.err)
			continue
		}
		if h, err := g.l.find(resource, ids); err == nil && !h.Init {
			return h, true
		}
	}
	return holder{}, false
}

// asks reports whether a container of pod asks for resource.
func asks(pod *corev1.Pod, resource string) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if containerAsks(&list[i], resource) {
				return true
			}
		}
	}
	return false
}

// containerAsks reports whether c asks for resource.
func containerAsks(c *corev1.Container, resource string) bool {
	name := corev1.ResourceName(resource)
	if q, ok := c.Resources.Limits[name]; ok && !q.IsZero() {
		return true
	}
	q, ok := c.Resources.Requests[name]
	return ok && !q.IsZero()
}

// resolve finds the container holding ids of resource and returns its
// allocation from its pod's record, checked against this node's GPUs.
func (m *Manager) resolve(ctx context.Context, resource, claim string, ids []string) (*resolved, error) {
	h, err := m.holderOf(ctx, resource, claim, ids)
	if err != nil {
		return &resolved{holder: h}, fmt.Errorf("%s devices %v: %w", resource, ids[:min(len(ids), 3)], err)
	}
	m.forget(claim)
	if h.defers(resource) {
		return hookedOnly(h), nil
	}
	pod, err := m.cfg.Pods(ctx, h.Namespace, h.Pod)
	if err != nil {
		return &resolved{holder: h}, fmt.Errorf("reading pod %s/%s: %w", h.Namespace, h.Pod, err)
	}
	h.Container = whichContainer(pod, h, resource, len(ids))
	if h.Container == "" {
		return &resolved{holder: h}, fmt.Errorf("pod %s/%s: no container asks %d %s devices", h.Namespace, h.Pod, len(ids), resource)
	}
	c, err := m.allocation(pod, h.Container)
	if err != nil {
		return &resolved{holder: h}, err
	}
	if err := m.checkGPUs(h, c); err != nil {
		return &resolved{holder: h, alloc: c}, err
	}
	return &resolved{holder: h, alloc: c, env: m.aliyunEnvOf(pod, h.Container, c), mps: m.asksMPS(pod, h.Container)}, nil
}

// allocation returns container's allocation from pod's record, which
// must be for this node.
func (m *Manager) allocation(pod *corev1.Pod, container string) (*gpusharev1.ContainerAllocation, error) {
	value, ok := pod.Annotations[gpusharev1.AllocationAnnotation]
	var a *gpusharev1.Allocation
	var err error
	switch {
	case ok:
		a, err = gpusharev1.ParseAllocation(value)
	case gpucache.Foreign(pod) != nil:
		a, err = m.foreignAllocation(pod)
	default:
		return nil, fmt.Errorf("pod %s/%s has no %s annotation: it was not scheduled by gpushare", pod.Namespace, pod.Name, gpusharev1.AllocationAnnotation)
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if a.Node != m.cfg.Node || pod.Spec.NodeName != m.cfg.Node {
		return nil, fmt.Errorf("pod %s/%s: its GPUs were allocated on node %s, it is bound to %q, this is %s", pod.Namespace, pod.Name, a.Node, pod.Spec.NodeName, m.cfg.Node)
	}
	if err := m.conforms(pod, a); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	for i := range a.Containers {
		if a.Containers[i].Name == container {
			return &a.Containers[i], nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s: the allocation record has no container %s", pod.Namespace, pod.Name, container)
}

// conforms checks the record against what the pod's spec asks
// (alloc.Conform), so that a record written by hand cannot hand a
// container more than it asked for.
func (m *Manager) conforms(pod *corev1.Pod, a *gpusharev1.Allocation) error {
	if m.cfg.Requests == nil {
		return nil
	}
	req, err := m.cfg.Requests(pod)
	if err != nil {
		return fmt.Errorf("the pod's own request: %w", err)
	}
	p, err := gpucache.PlacementFrom(a, nil)
	if err != nil {
		return err
	}
	return alloc.Conform(p, req, nil)
}

// checkGPUs checks that this node has the GPUs of c, healthy.
func (m *Manager) checkGPUs(h holder, c *gpusharev1.ContainerAllocation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range c.GPUs {
		d, ok := m.gpus[g.UUID]
		switch {
		case !ok || d.Index != g.Index:
			return fmt.Errorf("pod %s/%s container %s: GPU %d (%s): %w", h.Namespace, h.Pod, h.Container, g.Index, g.UUID, errNoGPU)
		case !d.Healthy:
			return fmt.Errorf("pod %s/%s container %s: GPU %d (%s) is unhealthy", h.Namespace, h.Pod, h.Container, g.Index, g.UUID)
		}
	}
	return nil
}

// whichContainer names the container of pod that the kubelet asked about.
// The listing names app and sidecar containers only, and app containers
// reuse the devices of init containers: devices held within a listed
// container's (h.Init), or exactly those of an app container while an
// init container asking as many has not finished, are that init
// container's.
func whichContainer(pod *corev1.Pod, h holder, resource string, count int) string {
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			continue // sidecars are listed under their own name
		}
		if q, ok := c.Resources.Limits[corev1.ResourceName(resource)]; !ok || q.Value() != int64(count) {
			continue
		}
		// Hooks are numbered apart (deploy/gpu-hook-policy.yaml): the
		// count alone says, where the pod's status may lag.
		if !finished(pod, c.Name) || resource == gpusharev1.HookResource {
			return c.Name
		}
	}
	if h.Init {
		return ""
	}
	return h.Container
}

// finished reports whether the pod's status says init container name
// exited successfully.
func finished(pod *corev1.Pod, name string) bool {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == name && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
			return true
		}
	}
	return false
}
