package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// plugin serves one resource.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	res    Resource
	socket string
	m      *Manager
	logger klog.Logger

	mu sync.Mutex
	// gpus are the node's GPUs as last read, and count the devices they
	// make. The device list is built for each ListAndWatch send and not
	// kept: for MiB tokens it is tens of MiB.
	gpus  []gpu.Device
	count int64
	// registeredOnce is set, under Manager.mu, once the plugin has
	// registered with the kubelet and sent it its devices.
	registeredOnce bool
	// updates wakes ListAndWatch streams when devices change.
	updates chan struct{}
	server  *grpc.Server
}

func (p *plugin) setGPUs(gpus []gpu.Device, count int64) {
	p.mu.Lock()
	p.gpus, p.count = gpus, count
	old := p.updates
	p.updates = make(chan struct{})
	p.mu.Unlock()
	close(old)
}

func (p *plugin) snapshot() ([]gpu.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gpus, p.updates
}

// devices returns how many devices the plugin serves.
func (p *plugin) devices() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}

func (p *plugin) options() *pluginapi.DevicePluginOptions {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: p.count <= preferredMaxDevices}
}

// GetDevicePluginOptions implements pluginapi.DevicePluginServer.
func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

// ListAndWatch implements pluginapi.DevicePluginServer: the device list,
// again whenever a GPU's health changes.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		gpus, changed := p.snapshot()
		devs, err := p.res.deviceList(gpus, p.m.cfg.sizing())
		if err != nil {
			return err
		}
		big := len(devs) > preferredMaxDevices
		err = stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs})
		if big {
			// A big list is sent rarely (registration, health changes):
			// give its memory back now rather than keep it resident.
			debug.FreeOSMemory()
		}
		if err != nil {
			return err
		}
		p.m.noteRegistered(p)
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation implements pluginapi.DevicePluginServer. The
// devices are tokens; it prefers the lowest IDs so that allocations stay
// compact and easy to read.
func (p *plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.GetContainerRequests() {
		chosen := slices.Clone(c.GetMustIncludeDeviceIDs())
		for _, id := range c.GetAvailableDeviceIDs() {
			if len(chosen) >= int(c.GetAllocationSize()) {
				break
			}
			if !slices.Contains(chosen, id) {
				chosen = append(chosen, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return resp, nil
}

// Allocate implements pluginapi.DevicePluginServer: each container gets a
// CDI device named after its device IDs, resolved in PreStartContainer.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	defer p.m.observe("Allocate", time.Now())
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		// The request is this call's own: sorted in place, not copied.
		slices.Sort(c.GetDevicesIds())
		claim := cdi.ClaimOf(string(p.res.Name), c.GetDevicesIds())
		p.m.resolver.Allocated(claim)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			CdiDevices: []*pluginapi.CDIDevice{{Name: cdi.Kind + "=" + claim}},
		})
	}
	return resp, nil
}

// PreStartContainer implements pluginapi.DevicePluginServer: it finds the
// container that holds the devices, reads its pod's record and writes the
// CDI spec that Allocate named.
func (p *plugin) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	start := time.Now()
	defer p.m.observe("PreStartContainer", start)
	// Sorted once, for the claim and the search, in place: the request
	// is this call's own.
	ids := req.GetDevicesIds()
	slices.Sort(ids)
	claim := cdi.ClaimOf(string(p.res.Name), ids)
	h, a, via, err := p.m.resolver.Resolve(ctx, string(p.res.Name), claim, ids)
	if err != nil {
		p.logger.Error(err, "Refusing to start a container", "resource", p.res.Name, "devices", len(ids), "pod", klog.KRef(h.Namespace, h.Pod), "container", h.Container)
		return nil, err
	}
	if len(a.GPUs) == 0 {
		p.logger.V(2).Info("Container gets its GPUs through its hooks", "pod", klog.KRef(h.Namespace, h.Pod),
			"resource", p.res.Name, "took", time.Since(start))
	} else {
		p.logger.V(2).Info("Container gets its GPUs", "pod", klog.KRef(h.Namespace, h.Pod), "container", h.Container,
			"resource", p.res.Name, "gpus", uuids(a), "resolved", via, "took", time.Since(start))
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

func uuids(a *gpusharev1.ContainerAllocation) string {
	var s []string
	for _, g := range a.GPUs {
		s = append(s, g.UUID)
	}
	return strings.Join(s, ",")
}

// serve starts the plugin's gRPC server on its socket.
func (p *plugin) serve() error {
	_ = os.Remove(p.socket)
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("%s: %w", p.res.Name, err)
	}
	s := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s, p)
	p.mu.Lock()
	p.server = s
	p.mu.Unlock()
	go func() { _ = s.Serve(l) }()
	return nil
}

func (p *plugin) stop() {
	p.mu.Lock()
	s := p.server
	p.server = nil
	p.mu.Unlock()
	if s != nil {
		s.Stop()
	}
	_ = os.Remove(p.socket)
}

// register tells the kubelet about the plugin.
func (p *plugin) register(ctx context.Context, kubeletSocket string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socket),
		ResourceName: string(p.res.Name),
		Options:      p.options(),
	})
	if err != nil {
		return fmt.Errorf("registering %s with the kubelet: %w", p.res.Name, err)
	}
	return nil
}
