package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/podresources"
)

// Resolver finds the container behind a claim (holder.Resolver): the
// plugins know only device IDs, and the kubelet's PodResources API and
// the pod's record say the rest.
type Resolver interface {
	// Allocated notes that Allocate named claim.
	Allocated(claim string)
	// Resolve returns the container that holds ids of resource, claim,
	// and its allocation, with the claim's CDI spec written, and how it
	// was found ("ahead", "now"); or why the container must not start.
	Resolve(ctx context.Context, resource, claim string, ids []string) (podresources.Holder, *gpusharev1.ContainerAllocation, string, error)
	// SetGPUs passes the node's GPUs on, as last read.
	SetGPUs(devs []gpu.Device)
}

// MPS configures the environment of containers on GPUs shared under MPS.
type MPS = cdi.MPS

// Config configures the device plugins of one node.
type Config struct {
	// Dir is the kubelet's device plugin directory (kubelet.sock is in
	// it); the plugins' sockets go there too.
	Dir string
	// Resources are served, one plugin each.
	Resources []Resource
	Backend   gpu.Backend
	// SlotsPerGPU and MaxDevices; DefaultSlotsPerGPU and
	// DefaultMaxDevices if 0.
	SlotsPerGPU, MaxDevices int
	// HookDevices is how many devices the hook resource
	// (gpusharev1.HookResource) has, served besides Resources:
	// DefaultHookDevices if 0, none if negative.
	HookDevices int
	// HookMemory serves no devices for Memory resources counted in MiB:
	// the kubelet then leaves their counting to gpushare's scheduler, and
	// their containers reach the plugins through their hooks (the GPU hook
	// admission policies give them). Resources in GiB keep their devices.
	HookMemory bool
	// Observe, if set, is told how long each Allocate and
	// PreStartContainer call took ("Allocate", "PreStartContainer").
	Observe func(method string, took time.Duration)
}

func (c *Config) sizing() sizing {
	return sizing{slots: c.SlotsPerGPU, hooks: c.HookDevices, maxDevices: c.MaxDevices, hookMemory: c.HookMemory}
}

// Manager runs a plugin for each resource and keeps them registered.
type Manager struct {
	cfg      Config
	logger   klog.Logger
	resolver Resolver
	plugins  []*plugin
	// skipped says why a resource is not served.
	skipped map[string]error

	mu sync.Mutex
	// cancelRegister ends the registration goroutines of the last
	// restart; registering waits for them.
	cancelRegister context.CancelFunc
	registering    sync.WaitGroup
	// registered is closed once every plugin has registered with the
	// kubelet; unregistered counts those that have not yet.
	registered   chan struct{}
	unregistered int
}

// New checks cfg, discovers the GPUs and builds the plugins, which ask
// r about the containers that hold their devices.
func New(logger klog.Logger, cfg Config, r Resolver) (*Manager, error) {
	if cfg.Dir == "" || cfg.Backend == nil || r == nil {
		return nil, errors.New("device plugin: plugin directory, GPU backend and resolver are required")
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
	m := &Manager{cfg: cfg, logger: logger, resolver: r, skipped: map[string]error{}, registered: make(chan struct{})}
	devs, err := cfg.Backend.Devices()
	if err != nil {
		return nil, fmt.Errorf("discovering GPUs: %w", err)
	}
	r.SetGPUs(devs)
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
	return m, nil
}

// Skipped returns the resources not served and why.
func (m *Manager) Skipped() map[string]error { return m.skipped }

// Served returns the resources the plugins serve.
func (m *Manager) Served() []string {
	out := make([]string, 0, len(m.plugins))
	for _, p := range m.plugins {
		out = append(out, string(p.res.Name))
	}
	return out
}

// Run serves and registers the plugins, and registers them again
// whenever the kubelet restarts (its socket is created anew), until ctx
// ends.
func (m *Manager) Run(ctx context.Context) error {
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

	for {
		select {
		case <-ctx.Done():
			return nil
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
// and sent it its devices (the first time; the kubelet advertises a
// resource once it has its devices, not when the plugin registers). Until
// then the kubelet admits pods without counting or allocating the
// resources not registered yet (it leaves out those the node does not
// advertise), so the node should not take GPU pods: the daemon publishes
// the node's GPUs only then.
func (m *Manager) Registered() <-chan struct{} { return m.registered }

// noteRegistered counts p's first device list sent to the kubelet.
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

// SetGPUs updates every plugin's devices, and the resolver's GPUs, to
// devs: the node's GPUs read again after a health change.
func (m *Manager) SetGPUs(devs []gpu.Device) {
	m.resolver.SetGPUs(devs)
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
