package dra

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// Plugin is the kubelet plugin of driver gpu.gpushare.io: it publishes
// the node's GPUs as the devices of one pool, named after the node, and
// prepares the claims the kubelet hands it with Preparer.
type Plugin struct {
	Preparer *Preparer
	// Options are how the node shares its GPUs.
	Options Options
	Logger  klog.Logger

	// helper is the running kubelet plugin helper.
	helper atomic.Pointer[kubeletplugin.Helper]
	// wake asks Run to publish again now (Wake).
	wake chan struct{}
	once sync.Once
}

// Wake asks Run to read the GPUs and the pods' bookings and publish
// again if they changed: a pod on the node was bound or ended.
func (p *Plugin) Wake() {
	select {
	case p.wakeup() <- struct{}{}:
	default:
	}
}

func (p *Plugin) wakeup() chan struct{} {
	p.once.Do(func() { p.wake = make(chan struct{}, 1) })
	return p.wake
}

// booked is what the node's pods book of each GPU, or nil when the
// Preparer cannot say (then devices are published whole, and Prepare
// still refuses what over-commits).
func (p *Plugin) booked() map[string]Share {
	if p.Preparer == nil || p.Preparer.Booked == nil {
		return nil
	}
	b, err := p.Preparer.Booked()
	if err != nil {
		p.Logger.Error(err, "Reading what the node's pods book; publishing the GPUs whole")
		return nil
	}
	return b
}

// Started reports whether the plugin serves the kubelet.
func (p *Plugin) Started() bool { return p.helper.Load() != nil }

// Registered reports whether the kubelet has registered the plugin, and
// why not where it said so.
func (p *Plugin) Registered() (bool, string) {
	h := p.helper.Load()
	if h == nil {
		return false, "not started"
	}
	s := h.RegistrationStatus()
	switch {
	case s == nil:
		return false, "the kubelet has not registered the plugin yet"
	case !s.PluginRegistered:
		return false, "the kubelet refused the plugin: " + s.Error
	}
	return true, ""
}

var _ kubeletplugin.DRAPlugin = (*Plugin)(nil)

// PrepareResourceClaims prepares each claim; one that fails gets its
// error, and the kubelet asks again.
func (p *Plugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := p.Preparer.Prepare(c)
		if err != nil {
			p.Logger.Error(err, "Preparing a claim", "claim", klog.KObj(c))
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		p.Logger.Info("Claim prepared", "claim", klog.KObj(c), "devices", len(devs))
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs}
	}
	return out, nil
}

// UnprepareResourceClaims removes what Prepare wrote for each claim.
func (p *Plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = p.Preparer.Unprepare(string(c.UID))
		p.Logger.Info("Claim unprepared", "claim", c.NamespacedName, "err", out[c.UID])
	}
	return out, nil
}

// HandleError logs errors met in the background (publishing slices):
// the helper retries the recoverable ones, and the others (a field the
// API server dropped, a slice it refused) need an operator.
func (p *Plugin) HandleError(_ context.Context, err error, msg string) {
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		p.Logger.Error(err, msg, "recoverable", true)
		return
	}
	p.Logger.Error(err, msg, "recoverable", false)
}

// WatchHealthStatus reports no health: an unhealthy GPU is withdrawn
// from the slice instead.
func (p *Plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// Run registers the plugin with the kubelet and publishes the node's
// GPUs, each less what the node's pods book (DevicesBeside), again every
// resync (a GPU that turned unhealthy is withdrawn) and on Wake, until
// ctx ends. pluginDir and registryDir are the kubelet's (empty:
// the default under /var/lib/kubelet).
func (p *Plugin) Run(ctx context.Context, client kubernetes.Interface, node, pluginDir, registryDir string, backend gpu.Backend, resync time.Duration) error {
	opts := []kubeletplugin.Option{kubeletplugin.DriverName(Driver), kubeletplugin.KubeClient(client), kubeletplugin.NodeName(node),
		kubeletplugin.HealthService(false)}
	if pluginDir != "" {
		opts = append(opts, kubeletplugin.PluginDataDirectoryPath(pluginDir))
	}
	if registryDir != "" {
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(registryDir))
	}
	helper, err := kubeletplugin.Start(klog.NewContext(ctx, p.Logger), p, opts...)
	if err != nil {
		return fmt.Errorf("starting the DRA kubelet plugin %s: %w", Driver, err)
	}
	defer helper.Stop()
	p.helper.Store(helper)
	defer p.helper.Store(nil)
	p.Logger.Info("DRA kubelet plugin started", "driver", Driver)
	var last []resourceapi.Device
	for {
		gpus, err := backend.Devices()
		if err != nil {
			p.Logger.Error(err, "Listing the GPUs to publish")
		} else if devs := DevicesBeside(gpus, p.Options, p.booked()); last == nil || !apiequality.Semantic.DeepEqual(last, devs) {
			// One pool, named after the node, of one slice.
			res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node: {Slices: []resourceslice.Slice{{Devices: devs}}}}}
			if err := helper.PublishResources(ctx, res); err != nil {
				p.Logger.Error(err, "Publishing the GPUs as DRA devices")
			} else {
				last = devs
				p.Logger.Info("Published the GPUs as DRA devices", "devices", len(last))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(resync):
		case <-p.wakeup():
		}
	}
}
