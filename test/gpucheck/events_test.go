//go:build gpucheck

package gpucheck

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// eventsPart is the health event section: NVML's event set, and the
// backend's Watch over it.
type eventsPart struct {
	part
	// XIDEvents says for each GPU whether NVML took a registration for
	// critical XID events ("registered", "not supported: why").
	XIDEvents []string `json:"xidEvents"`
	// WaitedSeconds is how long Watch ran: over one of its 5 s polls.
	WaitedSeconds float64 `json:"waitedSeconds"`
	// Injected are the XIDs the fake sent; none on a real machine.
	Injected []string `json:"injected,omitempty"`
	// Reported are the health events Watch sent, Expected those it had
	// to: the injected critical XIDs, and nothing from healthy GPUs.
	Reported []string `json:"reported"`
	Expected []string `json:"expected"`
}

// watchFor is how long Watch runs without an event expected: past the
// backend's 5 s poll of every GPU.
const watchFor = 6 * time.Second

func checkEvents(ctx context.Context, t *testing.T, m *machine, p *eventsPart) {
	defer p.end()
	if m.fake != nil {
		p.start(t, m.against(), "NVML's event set on the fake (go-nvml's mock), which sends XID 13 and XID 79; the node daemon's Watch (pkg/gpu/nvml) over it")
	} else {
		p.start(t, m.against(), "NVML's event set on this machine's GPUs (no XID can be injected: a healthy GPU must send none); the node daemon's Watch (pkg/gpu/nvml) over it")
	}
	p.registerXIDs(m.lib)

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events := make(chan gpu.Event, 16)
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- m.backend.Watch(wctx, events) }()
	var want []gpu.Event
	if m.fake != nil {
		p.Injected, want = m.fake.injectXIDs()
	}
	p.Expected = []string{}
	for _, ev := range want {
		p.Expected = append(p.Expected, describe(ev))
	}
	p.Reported = []string{}
	deadline := time.NewTimer(watchFor)
	defer deadline.Stop()
	// Once every expected event came, a second more for any that must
	// not.
	var grace <-chan time.Time
collect:
	for {
		select {
		case ev := <-events:
			p.Reported = append(p.Reported, describe(ev))
			if len(p.Expected) > 0 && len(p.Reported) >= len(p.Expected) && grace == nil {
				grace = time.After(time.Second)
			}
		case <-grace:
			break collect
		case <-deadline.C:
			break collect
		case <-ctx.Done():
			p.fail("%v", ctx.Err())
			return
		}
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			p.fail("Watch: %v", err)
		}
	case <-time.After(10 * time.Second):
		p.fail("Watch did not return within 10 s of its context ending")
	}
	p.WaitedSeconds = time.Since(began).Round(100 * time.Millisecond).Seconds()
	if !slices.Equal(sortedStrings(p.Reported), sortedStrings(p.Expected)) {
		p.fail("health events %q, want %q", p.Reported, p.Expected)
	}
	// The GPUs Watch reported stay unhealthy in the inventory, and only
	// they.
	devs, err := m.backend.Devices()
	if err != nil {
		p.fail("NVML backend after Watch: %v", err)
		return
	}
	var unhealthy []string
	for _, d := range devs {
		if !d.Healthy {
			unhealthy = append(unhealthy, d.UUID)
		}
	}
	var lost []string
	for _, ev := range want {
		lost = append(lost, ev.UUID)
	}
	if !slices.Equal(sortedStrings(unhealthy), sortedStrings(lost)) {
		p.fail("unhealthy GPUs after Watch %q, want %q", unhealthy, lost)
	}
}

// describe is a health event as the report says it.
func describe(ev gpu.Event) string {
	if ev.Healthy {
		return ev.UUID + ": healthy"
	}
	return ev.UUID + ": " + ev.Reason
}

// registerXIDs registers every GPU for critical XID events on an event
// set of its own, as Watch does, and waits on it briefly: a GPU that
// supports the events must take the registration, and the wait must time
// out (no event) or return one.
func (p *eventsPart) registerXIDs(lib nvml.Interface) {
	p.t.Helper()
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		p.fail("NVML event set: %s", nvml.ErrorString(ret))
		return
	}
	defer func() {
		if ret := set.Free(); ret != nvml.SUCCESS {
			p.fail("freeing the event set: %s", nvml.ErrorString(ret))
		}
	}()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		p.fail("NVML device count: %s", nvml.ErrorString(ret))
		return
	}
	registered := 0
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			p.fail("NVML device %d: %s", i, nvml.ErrorString(ret))
			continue
		}
		types, ret := h.GetSupportedEventTypes()
		switch {
		case ret != nvml.SUCCESS:
			p.XIDEvents = append(p.XIDEvents, "not supported: "+nvml.ErrorString(ret))
		case types&uint64(nvml.EventTypeXidCriticalError) == 0:
			p.XIDEvents = append(p.XIDEvents, fmt.Sprintf("not supported (supported event types %#x)", types))
		default:
			if ret := h.RegisterEvents(uint64(nvml.EventTypeXidCriticalError), set); ret != nvml.SUCCESS {
				p.XIDEvents = append(p.XIDEvents, "error: "+nvml.ErrorString(ret))
				p.fail("GPU %d supports XID events but does not take a registration: %s", i, nvml.ErrorString(ret))
				continue
			}
			p.XIDEvents = append(p.XIDEvents, "registered")
			registered++
		}
	}
	if registered == 0 {
		// Nothing to wait on; Watch then relies on its polls alone.
		return
	}
	if _, ret := set.Wait(500); ret != nvml.SUCCESS && ret != nvml.ERROR_TIMEOUT {
		p.fail("waiting on the event set: %s", nvml.ErrorString(ret))
	}
}

func sortedStrings(s []string) []string {
	out := slices.Sorted(slices.Values(s))
	if out == nil {
		out = []string{}
	}
	return out
}
