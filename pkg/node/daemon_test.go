package node

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/klog/v2/ktesting"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpu/sim"
)

// publisher records what is published.
type publisher struct {
	mu   sync.Mutex
	invs []*gpusharev1.GPUInventory
}

func (p *publisher) Publish(_ context.Context, inv *gpusharev1.GPUInventory) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.invs = append(p.invs, inv)
	return nil
}

func (*publisher) PublishUsage(context.Context, *gpusharev1.GPUUsage) error { return nil }

func (p *publisher) published() []*gpusharev1.GPUInventory {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*gpusharev1.GPUInventory(nil), p.invs...)
}

// plugins are device plugins that register when told to.
type plugins struct {
	registered chan struct{}
	mu         sync.Mutex
	gpus       [][]gpu.Device
}

func (p *plugins) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (p *plugins) Registered() <-chan struct{} { return p.registered }

func (p *plugins) SetGPUs(devs []gpu.Device) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gpus = append(p.gpus, devs)
}

func (p *plugins) updates() [][]gpu.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]gpu.Device(nil), p.gpus...)
}

// The inventory is published only once the device plugins have
// registered, and a GPU health event reaches both the plugins and the
// inventory, from the one watch.
func TestHealthFansOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		backend, err := sim.New(&sim.Config{GPUs: []sim.Group{{Model: "Tesla T4", MemoryMiB: 16384, Count: 2}}})
		if err != nil {
			t.Fatal(err)
		}
		pub := &publisher{}
		pl := &plugins{registered: make(chan struct{})}
		d, err := New(Config{Backend: backend, Publisher: pub, Mode: gpusharev1.ModeShared, Resync: time.Hour, Plugins: pl})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		synctest.Wait()
		if got := pub.published(); len(got) != 0 {
			t.Fatalf("published %d inventories before the plugins registered; want none", len(got))
		}
		close(pl.registered)
		synctest.Wait()
		if got := pub.published(); len(got) != 1 || len(got[0].GPUs) != 2 {
			t.Fatalf("published %v once the plugins registered; want one inventory of 2 GPUs", got)
		}
		if err := backend.SetHealth(1, false, "XID 79"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got, updates := pub.published(), pl.updates()
		if len(got) != 2 || got[1].GPUs[1].Healthy {
			t.Errorf("after GPU 1 turned unhealthy the inventories were %+v; want a second with GPU 1 unhealthy", got)
		}
		if len(updates) != 1 || updates[0][1].Healthy {
			t.Errorf("after GPU 1 turned unhealthy the plugins got %+v; want its GPUs once, GPU 1 unhealthy", updates)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
