package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/inventory"
)

// Publisher writes the node's GPU inventory and live use on its Node
// (inventory.Publisher).
type Publisher interface {
	Publish(ctx context.Context, inv *gpusharev1.GPUInventory) error
	UsagePublisher
}

// UsagePublisher publishes the node's live GPU use: on the daemon's Lease
// (lease.Renewer), or on its Node (inventory.Publisher) for a daemon
// without a lease.
type UsagePublisher interface {
	PublishUsage(ctx context.Context, u *gpusharev1.GPUUsage) error
}

// Plugins are the device plugins (deviceplugin.Manager).
type Plugins interface {
	// Run serves and registers them until ctx ends.
	Run(ctx context.Context) error
	// Registered is closed once every plugin has registered.
	Registered() <-chan struct{}
	// SetGPUs passes the GPUs on, read again after a health change.
	SetGPUs(devs []gpu.Device)
}

// Config is what the daemon runs.
type Config struct {
	Backend   gpu.Backend
	Publisher Publisher
	// Usage, if set, publishes live use instead of Publisher: the
	// daemon's lease renewer, so that live use, which changes often,
	// does not write the Node.
	Usage UsagePublisher
	// Mode, MPS and Enforcement are published with the inventory;
	// ReservedMiB, if set, is the memory of a model kept from the pods.
	Mode        gpusharev1.Mode
	MPS         bool
	Enforcement gpusharev1.Enforcement
	ReservedMiB func(model string) int64
	// Resync is how often the inventory is published without a health
	// event; UsageEvery how often live use is (0: never).
	Resync, UsageEvery time.Duration
	// Plugins, if set, are run, and the inventory is published only once
	// they have registered with the kubelet. Sweeper, if set, removes
	// unused CDI specs every cdi.SweepEvery.
	Plugins Plugins
	Sweeper *cdi.Sweeper
	// Services run beside, each until ctx ends; an error from one ends
	// the daemon (http.ErrServerClosed excepted).
	Services []func(ctx context.Context) error
}

// Daemon is the node daemon's loop.
type Daemon struct {
	cfg Config
}

// New returns the daemon of cfg.
func New(cfg Config) (*Daemon, error) {
	if cfg.Backend == nil || cfg.Publisher == nil || cfg.Resync <= 0 {
		return nil, errors.New("node daemon: GPU backend, publisher and resync interval are required")
	}
	return &Daemon{cfg: cfg}, nil
}

// Run runs the daemon until ctx ends or a part of it fails. The GPUs are
// published once the device plugins have registered with the kubelet (at
// once without them): a pod admitted before would hold none of the
// devices through which its containers get their GPUs.
func (d *Daemon) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	c := d.cfg
	errc := make(chan error, 4+len(c.Services))
	for _, s := range c.Services {
		go func() { errc <- s(ctx) }()
	}
	ready := make(chan struct{})
	if c.Plugins != nil {
		go func() { errc <- c.Plugins.Run(ctx) }()
		go func(ready chan<- struct{}) {
			select {
			case <-c.Plugins.Registered():
				close(ready)
			case <-ctx.Done():
			}
		}(ready)
	} else {
		close(ready)
	}
	if c.Sweeper != nil {
		go c.Sweeper.Run(ctx, cdi.SweepEvery)
	}
	health := newHealth(c.Backend)
	go func() {
		if err := health.watch(ctx); err != nil {
			errc <- fmt.Errorf("watching GPU health: %w", err)
		}
	}()
	tick := time.NewTicker(c.Resync)
	defer tick.Stop()
	var usageTick <-chan time.Time
	if c.UsageEvery > 0 {
		t := time.NewTicker(c.UsageEvery)
		defer t.Stop()
		usageTick = t.C
		d.publishUsage(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
		case <-ready:
			ready = nil
			if d.publish(ctx, nil) {
				logger.Info("Published the GPU inventory", "mode", c.Mode)
			}
		case ev := <-health.events:
			logger.Info("GPU health changed", "uuid", ev.UUID, "healthy", ev.Healthy, "reason", ev.Reason)
			// One read of the GPUs, for the plugins and the inventory.
			devs, err := c.Backend.Devices()
			if err != nil {
				logger.Error(err, "Reading GPUs")
			} else if c.Plugins != nil {
				c.Plugins.SetGPUs(devs)
			}
			if ready == nil {
				if err != nil {
					devs = nil
				}
				d.publish(ctx, devs)
			}
		case <-tick.C:
			if ready == nil {
				d.publish(ctx, nil)
			}
		case <-usageTick:
			d.publishUsage(ctx)
		}
	}
}

// publish publishes the inventory of devs, or of the GPUs read now if
// devs is nil, and reports whether it did.
func (d *Daemon) publish(ctx context.Context, devs []gpu.Device) bool {
	var err error
	if devs == nil {
		devs, err = d.cfg.Backend.Devices()
	}
	if err == nil {
		if d.cfg.ReservedMiB != nil {
			devs = inventory.Reserve(devs, d.cfg.ReservedMiB)
		}
		inv := inventory.From(devs, d.cfg.Mode, d.cfg.MPS)
		inv.Enforcement = d.cfg.Enforcement
		err = d.cfg.Publisher.Publish(ctx, inv)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Publishing the GPU inventory")
	}
	return err == nil
}

// publishUsage publishes a sample of the GPUs' live use.
func (d *Daemon) publishUsage(ctx context.Context) {
	logger := klog.FromContext(ctx)
	devs, err := d.cfg.Backend.Devices()
	if err != nil {
		logger.Error(err, "Reading GPUs")
		return
	}
	use, err := d.cfg.Backend.Usage()
	if err == nil {
		var to UsagePublisher = d.cfg.Publisher
		if d.cfg.Usage != nil {
			to = d.cfg.Usage
		}
		err = to.PublishUsage(ctx, inventory.UsageFrom(use, devs, time.Now()))
	}
	if err != nil {
		logger.Error(err, "Publishing live GPU use")
	}
}
