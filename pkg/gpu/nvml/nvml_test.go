//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// Without a driver New says so; with one, every GPU it lists has a UUID,
// a model and memory.
func TestNew(t *testing.T) {
	b, err := New()
	if err != nil {
		if !strings.Contains(err.Error(), "NVIDIA driver") {
			t.Fatalf("error without a driver does not say what is missing: %v", err)
		}
		return
	}
	defer func() { _ = b.Close() }()
	devs, err := b.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.UUID == "" || d.Model == "" || d.MemoryMiB <= 0 {
			t.Errorf("GPU %d: %+v", d.Index, d)
		}
	}
	t.Logf("%d GPUs: %+v", len(devs), devs)
}

func TestBusID(t *testing.T) {
	var raw [32]int8
	for i, c := range "00000000:17:00.0" {
		raw[i] = int8(c)
	}
	if got := busID(raw); got != "0000:17:00.0" {
		t.Errorf("busID = %q", got)
	}
}

// fakeNVML is NVML over GPUs that can answer with an error (answer: e.g.
// "GPU is lost" when fallen off the bus), be listed in another order or
// not at all (order: the GPU at each index), and send XID events.
type fakeNVML struct {
	lib    *mock.Interface
	answer []atomic.Int32
	xids   chan nvml.EventData
	gpus   []*mock.Device

	mu    sync.Mutex
	order []int
}

func newFakeNVML(n int) *fakeNVML {
	f := &fakeNVML{answer: make([]atomic.Int32, n), xids: make(chan nvml.EventData, 4)}
	for i := range n {
		f.order = append(f.order, i)
		answer := func() nvml.Return { return nvml.Return(f.answer[i].Load()) }
		f.gpus = append(f.gpus, &mock.Device{
			GetUUIDFunc:       func() (string, nvml.Return) { return fmt.Sprintf("GPU-%d", i), answer() },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 16 << 30}, answer() },
			// Older drivers do not report the reservation.
			GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED },
			GetNameFunc:          func() (string, nvml.Return) { return "Tesla T4", answer() },
			GetPciInfoFunc:       func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.ERROR_NOT_SUPPORTED },
			GetMinorNumberFunc:   func() (int, nvml.Return) { return 10 + i, nvml.SUCCESS },
			GetNvLinkStateFunc:   func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
			RegisterEventsFunc:   func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
		})
	}
	listed := func() []int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.order
	}
	f.lib = &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(listed()), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			order := listed()
			if i >= len(order) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return f.gpus[order[i]], nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) {
			return &mock.EventSet{
				WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
					select {
					case e := <-f.xids:
						return e, nvml.SUCCESS
					case <-time.After(time.Duration(ms) * time.Millisecond):
						return nvml.EventData{}, nvml.ERROR_TIMEOUT
					}
				},
				FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			}, nvml.SUCCESS
		},
	}
	return f
}

// lose makes GPU i answer as fallen off the bus.
func (f *fakeNVML) lose(i int) { f.answer[i].Store(int32(nvml.ERROR_GPU_IS_LOST)) }

// list makes the driver list these GPUs, in this order.
func (f *fakeNVML) list(gpus ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.order = gpus
}

// health is each GPU's UUID and health.
func health(devs []gpu.Device) string {
	var s []string
	for _, d := range devs {
		s = append(s, fmt.Sprintf("%d:%s:%v", d.Index, d.UUID, d.Healthy))
	}
	return strings.Join(s, " ")
}

// A GPU that stops answering (fallen off the bus) or that the driver stops
// listing stays listed, in its place and with its size, unhealthy, and
// stays so when it answers again; a GPU that never answered is an error.
func TestVanishedGPU(t *testing.T) {
	f := newFakeNVML(3)
	b, err := newBackend(f.lib)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := b.Devices()
	if want := "0:GPU-0:true 1:GPU-1:true 2:GPU-2:true"; err != nil || health(devs) != want {
		t.Fatalf("Devices = %s, %v; want %s", health(devs), err, want)
	}
	// The device node is named by the minor number, not the index.
	if devs[2].DeviceNode != "/dev/nvidia12" {
		t.Errorf("GPU 2's device node is %q; want /dev/nvidia12 (its minor number)", devs[2].DeviceNode)
	}
	// A passing error is an error, not a lost GPU.
	f.answer[1].Store(int32(nvml.ERROR_UNKNOWN))
	if devs, err := b.Devices(); err == nil {
		t.Errorf("Devices with GPU 1 answering ERROR_UNKNOWN = %s; want an error", health(devs))
	}
	f.answer[1].Store(int32(nvml.SUCCESS))
	f.lose(1)
	devs, err = b.Devices()
	if want := "0:GPU-0:true 1:GPU-1:false 2:GPU-2:true"; err != nil || health(devs) != want {
		t.Fatalf("GPU 1 lost: Devices = %s, %v; want %s", health(devs), err, want)
	}
	if devs[1].MemoryMiB != 16384 {
		t.Errorf("GPU 1 lost: listed with %d MiB; want 16384 MiB, as last read", devs[1].MemoryMiB)
	}
	if r := b.reason("GPU-1"); !strings.Contains(r, "vanished") || !strings.Contains(r, "device 1") {
		t.Errorf("GPU 1 is unhealthy because %q; want it to say it vanished and why", r)
	}
	f.answer[1].Store(int32(nvml.SUCCESS))
	f.list(0, 1)
	devs, err = b.Devices()
	if want := "0:GPU-0:true 1:GPU-1:false 2:GPU-2:false"; err != nil || health(devs) != want {
		t.Errorf("GPU 1 back, GPU 2 gone from the driver: Devices = %s, %v; want %s", health(devs), err, want)
	}
	// The driver numbers the GPUs anew without GPU 0: it is left out, the
	// others are listed as numbered now.
	f.list(1, 2)
	devs, err = b.Devices()
	if want := "0:GPU-1:false 1:GPU-2:false"; err != nil || health(devs) != want {
		t.Errorf("GPU 0 gone, the others renumbered: Devices = %s, %v; want %s", health(devs), err, want)
	}

	// Never seen answering: nothing to list it as.
	f = newFakeNVML(2)
	f.lose(0)
	if b, err = newBackend(f.lib); err != nil {
		t.Fatal(err)
	}
	if devs, err := b.Devices(); err == nil || !strings.Contains(err.Error(), "device 0") {
		t.Errorf("Devices with GPU 0 lost from the start = %s, %v; want an error naming device 0", health(devs), err)
	}
}

// Watch reports a GPU unhealthy once: on a critical XID event (not on an
// application's XID), and when it stops answering, which sends no event.
func TestWatch(t *testing.T) {
	f := newFakeNVML(2)
	b, err := newBackend(f.lib)
	if err != nil {
		t.Fatal(err)
	}
	b.poll = 20 * time.Millisecond
	if _, err := b.Devices(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan gpu.Event, 8)
	done := make(chan error, 1)
	go func() { done <- b.Watch(ctx, events) }()
	next := func() (gpu.Event, bool) {
		select {
		case ev := <-events:
			return ev, true
		case <-time.After(5 * time.Second):
			return gpu.Event{}, false
		}
	}
	f.xids <- nvml.EventData{Device: f.gpus[0], EventType: nvml.EventTypeXidCriticalError, EventData: 13}
	f.xids <- nvml.EventData{Device: f.gpus[0], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	if ev, ok := next(); !ok || ev != (gpu.Event{UUID: "GPU-0", Healthy: false, Reason: "XID 79"}) {
		t.Errorf("after XIDs 13 and 79 on GPU 0: %+v, %v; want GPU-0 unhealthy by XID 79", ev, ok)
	}
	f.lose(1)
	if ev, ok := next(); !ok || ev.UUID != "GPU-1" || ev.Healthy || !strings.Contains(ev.Reason, "vanished") {
		t.Errorf("after GPU 1 stopped answering: %+v, %v; want GPU-1 unhealthy, vanished", ev, ok)
	}
	// Several polls later: nothing more to tell.
	time.Sleep(10 * b.poll)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch: %v", err)
	}
	close(events)
	for ev := range events {
		t.Errorf("told again: %+v", ev)
	}
}

// The usable memory is NVML's total less its reserved memory where the
// driver reports both (GetMemoryInfo_v2); otherwise it is left unknown
// (0: all of the total).
func TestUsableMemory(t *testing.T) {
	f := newFakeNVML(2)
	// GPU 1: 15360 MiB in all, 449 MiB reserved: 14911 MiB usable.
	f.gpus[1].GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		return nvml.Memory_v2{Total: 15360 << 20, Reserved: 449 << 20}, nvml.SUCCESS
	}
	b, err := newBackend(f.lib)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := b.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if d := devs[0]; d.MemoryMiB != 16384 || d.UsableMemoryMiB != 0 {
		t.Errorf("GPU 0 (no v2): %d MiB, %d usable; want 16384 and 0 (unknown)", d.MemoryMiB, d.UsableMemoryMiB)
	}
	if d := devs[1]; d.MemoryMiB != 15360 || d.UsableMemoryMiB != 14911 {
		t.Errorf("GPU 1: %d MiB, %d usable; want 15360 and 14911", d.MemoryMiB, d.UsableMemoryMiB)
	}
}
