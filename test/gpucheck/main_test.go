//go:build gpucheck

package gpucheck

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gpushare/gpushare/pkg/mps"
)

// The environment the checks read (hack/gpu-check.sh sets them).
const (
	// envMode is "nvml" (the machine's GPUs) or "fake" (the default).
	envMode = "GPUSHARE_GPU_CHECK"
	// envReport is where TestGPUCheck writes its JSON report.
	envReport = "GPUSHARE_GPU_CHECK_REPORT"
)

func TestMain(m *testing.M) {
	// The MPS supervisor re-executes this binary to give the control
	// daemon its own /dev/shm.
	mps.Shim()
	os.Exit(m.Run())
}

// report is gpu-check's result: the one JSON line hack/gpu-check.sh
// prints.
type report struct {
	Check string `json:"check"`
	// Mode is "nvml": the machine's GPUs, driver and MPS, or "fake":
	// go-nvml's mock and stand-ins; each section says again which.
	Mode    string  `json:"mode"`
	Pass    bool    `json:"pass"`
	Started string  `json:"started"`
	Seconds float64 `json:"seconds"`
	// Driver is the driver version NVML reports.
	Driver    string         `json:"driver,omitempty"`
	Inventory *inventoryPart `json:"inventory,omitempty"`
	Events    *eventsPart    `json:"events,omitempty"`
	Usage     *usagePart     `json:"usage,omitempty"`
	MPS       *mpsPart       `json:"mps,omitempty"`
	HAMiCore  *hamiCorePart  `json:"hamiCore,omitempty"`
	// Errors are failures outside the sections (setting up).
	Errors []string `json:"errors,omitempty"`
}

// part is what every section of the report says.
type part struct {
	// Against is "real" (the machine's GPU, driver, nvidia-smi or MPS)
	// or "fake".
	Against string `json:"against"`
	// Via says what ran against what.
	Via string `json:"via"`
	// Status is "pass", "fail" or "skipped: why".
	Status string   `json:"status"`
	Errors []string `json:"errors,omitempty"`

	t *testing.T
}

// start begins the section in test t.
func (p *part) start(t *testing.T, against, via string) {
	p.t, p.Against, p.Via, p.Status = t, against, via, "running"
}

// fail records a failure of the section and fails its test.
func (p *part) fail(format string, args ...any) {
	p.t.Helper()
	msg := fmt.Sprintf(format, args...)
	p.Errors = append(p.Errors, msg)
	p.t.Error(msg)
}

// skip records why the section could not run.
func (p *part) skip(why string) {
	p.t.Helper()
	p.Status = "skipped: " + why
	p.t.Log(p.Status)
}

// end sets the status from the failures recorded.
func (p *part) end() {
	switch {
	case len(p.Errors) > 0:
		p.Status = "fail"
	case p.Status == "running":
		p.Status = "pass"
	}
}

// TestGPUCheck runs the checks in order on one machine (the real one or
// the fake, by $GPUSHARE_GPU_CHECK) and writes the report to
// $GPUSHARE_GPU_CHECK_REPORT.
func TestGPUCheck(t *testing.T) {
	began := time.Now()
	r := &report{Check: "gpushare gpu-check", Mode: os.Getenv(envMode), Started: began.UTC().Format(time.RFC3339)}
	if r.Mode == "" {
		r.Mode = modeFake
	}
	defer func() {
		r.Seconds = time.Since(began).Round(100 * time.Millisecond).Seconds()
		r.Pass = !t.Failed()
		writeReport(t, r)
	}()
	ctx := t.Context()
	if deadline, ok := t.Deadline(); ok {
		// Leave time to write the report.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-20*time.Second))
		defer cancel()
	}
	m, err := newMachine(t, r.Mode)
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		t.Fatal(err)
	}
	r.Driver = m.driver
	// Each section is in the report before it runs: a check that stops
	// half-way reports what it found.
	r.Inventory, r.Events, r.Usage, r.MPS, r.HAMiCore = &inventoryPart{}, &eventsPart{}, &usagePart{}, &mpsPart{}, &hamiCorePart{}
	t.Run("inventory", func(t *testing.T) { checkInventory(ctx, t, m, r.Inventory) })
	t.Run("events", func(t *testing.T) { checkEvents(ctx, t, m, r.Events) })
	t.Run("usage", func(t *testing.T) { checkUsage(ctx, t, m, r.Usage) })
	t.Run("mps", func(t *testing.T) { checkMPS(ctx, t, m, r.MPS) })
	t.Run("hami-core", func(t *testing.T) { checkHAMiCore(ctx, t, m, r.HAMiCore) })
}

// writeReport writes r as one JSON line to $GPUSHARE_GPU_CHECK_REPORT
// and logs it.
func writeReport(t *testing.T, r *report) {
	b, err := json.Marshal(r)
	if err != nil {
		t.Errorf("encoding the report: %v", err)
		return
	}
	t.Logf("report: %s", b)
	if path := os.Getenv(envReport); path != "" {
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil { //nolint:gosec // a report, read by the script
			t.Errorf("writing the report: %v", err)
		}
	}
}
