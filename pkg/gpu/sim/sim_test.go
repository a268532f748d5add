package sim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/pkg/gpu"
)

func TestLoadFileStrict(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "gpus.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, err := LoadFile(write("gpus:\n- {model: T4, memoryMiB: 15360, count: 2, colour: red}\n")); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("unknown field: %v", err)
	}
	c, err := LoadFile(write("gpus:\n- {model: T4, memoryMiB: 15360, count: 2}\nfailures:\n- {index: 1, after: 1m, xid: 48}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Failures[0].After.Duration != time.Minute {
		t.Errorf("after: %v", c.Failures[0].After)
	}
}

func TestNewRejects(t *testing.T) {
	for name, c := range map[string]*Config{
		"no memory":       {GPUs: []Group{{Model: "T4", Count: 1}}},
		"bad nvlink":      {GPUs: []Group{{Model: "T4", MemoryMiB: 1, Count: 1, NVLink: "ring"}}},
		"usage no GPU":    {GPUs: []Group{{Model: "T4", MemoryMiB: 1, Count: 1}}, Usage: []Load{{Index: 1}}},
		"usage too much":  {GPUs: []Group{{Model: "T4", MemoryMiB: 100, Count: 1}}, Usage: []Load{{UsedMemoryMiB: 101}}},
		"failure no GPU":  {GPUs: []Group{{Model: "T4", MemoryMiB: 1, Count: 1}}, Failures: []Failure{{Index: 2}}},
		"usable too much": {GPUs: []Group{{Model: "T4", MemoryMiB: 100, UsableMemoryMiB: 101, Count: 1}}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Groups index on; NUMA and NVLink as configured; a scheduled failure
// reaches Devices and the watchers.
func TestTopologyAndFailure(t *testing.T) {
	b, err := New(&Config{
		GPUs: []Group{
			{Model: "A", MemoryMiB: 100, Count: 4, NUMANodes: 2, NVLink: "pairs"},
			{Model: "B", MemoryMiB: 200, Count: 2, NVLink: "all"},
		},
		Failures: []Failure{{Index: 5, After: Duration{50 * time.Millisecond}, XID: 79}},
	})
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := b.Devices()
	if len(devs) != 6 || devs[4].Index != 4 || devs[4].Model != "B" || devs[3].NUMANode != 1 || devs[1].NVLinkPeers[0] != 0 || devs[5].NVLinkPeers[0] != 4 {
		t.Fatalf("devices %+v", devs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	events := make(chan gpu.Event, 1)
	go func() { _ = b.Watch(ctx, events) }()
	select {
	case ev := <-events:
		if ev.UUID != devs[5].UUID || ev.Healthy || ev.Reason != "XID 79" {
			t.Errorf("event %+v", ev)
		}
	case <-ctx.Done():
		t.Fatal("no failure event")
	}
	if devs, _ := b.Devices(); devs[5].Healthy || !devs[4].Healthy {
		t.Errorf("after the failure: %+v", devs)
	}
}

// The usable memory is the group's, or unknown (0) when not configured.
func TestUsableMemory(t *testing.T) {
	b, err := New(&Config{GPUs: []Group{{Model: "Tesla T4", MemoryMiB: 15360, UsableMemoryMiB: 14911, Count: 1}, {Model: "L4", MemoryMiB: 23034, Count: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := b.Devices()
	if devs[0].UsableMemoryMiB != 14911 || devs[1].UsableMemoryMiB != 0 {
		t.Errorf("usable memory %d and %d; want 14911 and 0", devs[0].UsableMemoryMiB, devs[1].UsableMemoryMiB)
	}
}
