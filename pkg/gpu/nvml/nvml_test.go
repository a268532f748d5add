//go:build cgo

package nvml

import (
	"strings"
	"testing"
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
