package integration

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestExtenderMemoryBound: eight concurrent 50 MB filter bodies, two of
// them announced (Content-Length), six chunked, against the extender's
// default bounds: each gets 413 or 429, and its peak RSS stays under
// 200 MiB (it grew past 700 MB when only each body was bounded).
func TestExtenderMemoryBound(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	base, p := runExtender(t, c)
	before := peakRSS(t, p.Cmd.Process.Pid)
	const size = 50 << 20
	head := `{"pod":{"metadata":{"name":"p","namespace":"default"}},"nodenames":["a"],"padding":"`
	var wg sync.WaitGroup
	results := make([]string, 8)
	for i := range results {
		wg.Go(func() {
			body := io.MultiReader(strings.NewReader(head), io.LimitReader(repeat('x'), size-int64(len(head))-2), strings.NewReader(`"}`))
			req, err := http.NewRequest(http.MethodPost, base+"/gpushare-scheduler/filter", body)
			if err != nil {
				results[i] = err.Error()
				return
			}
			if i%4 == 0 {
				req.ContentLength = size
			}
			client := &http.Client{Timeout: 2 * time.Minute}
			resp, err := client.Do(req)
			if err != nil {
				results[i] = "error: " + err.Error()
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			results[i] = strconv.Itoa(resp.StatusCode)
		})
	}
	wg.Wait()
	after := peakRSS(t, p.Cmd.Process.Pid)
	t.Logf("answers %v; peak RSS %d MiB before, %d MiB after", results, before>>20, after>>20)
	for i, r := range results {
		if r != "413" && r != "429" {
			t.Errorf("body %d (announced %v): %s, want 413 or 429", i, i%4 == 0, r)
		}
	}
	if after > 200<<20 {
		t.Errorf("peak RSS %d MiB, want under 200 MiB", after>>20)
	}
	if resp, err := http.Get(base + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("extender unhealthy afterwards: %v", err)
	}
}

// repeat is an endless reader of b.
type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// peakRSS reads VmHWM, the process's peak resident set, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
