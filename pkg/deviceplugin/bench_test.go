package deviceplugin

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// BenchmarkStart100 is the target: 100 pods start on one node at
// once. Each op admits 100 identical pods (the kubelet's Allocate, one
// pod after another, as its admission does), then starts their containers
// concurrently (GetDeviceRunContainerOptions, which calls
// PreStartContainer), then removes them. It reports, over containers, the
// p50 and p99 of the plugin's own Allocate plus PreStartContainer time
// (plugin-*), and of the whole path through the kubelet's device manager
// (kubelet-*), whose MiB-token bookkeeping dominates.
//
// Two requests: 300 MiB of gpushare.io/gpu-mem (300 tokens each, 32768 on
// the node) and 10% of gpushare.io/gpu-core (10 tokens, 200 on the node).
func BenchmarkStart100(b *testing.B) {
	b.Run("gpu-mem=300", func(b *testing.B) { benchStart(b, share{mib: 300, compute: 10}) })
	b.Run("gpu-core=1", func(b *testing.B) {
		benchStart(b, share{resource: "gpushare.io/gpu-core", amount: 1, mib: 300, compute: 1})
	})
}

func benchStart(b *testing.B, req share) {
	klog.SetOutput(discard{})
	klog.LogToStderr(false)
	var (
		omu               sync.Mutex
		allocs, prestarts []time.Duration
	)
	n := startNodeWith(b, func(c *testConfig) {
		c.Observe = func(method string, d time.Duration) {
			omu.Lock()
			defer omu.Unlock()
			if method == "Allocate" {
				allocs = append(allocs, d)
			} else {
				prestarts = append(prestarts, d)
			}
		}
	})
	const pods = 100
	var lat []time.Duration
	round := 0
	for b.Loop() {
		round++
		all := make([]*corev1Pod, pods)
		alloc := make([]time.Duration, pods)
		for i := range all {
			s := req
			s.container, s.kind, s.gpu = "main", gpusharev1.ContainerApp, i%2
			all[i] = n.pod(fmt.Sprintf("r%d-%03d", round, i), s)
			start := time.Now()
			if err := n.admit(all[i]); err != nil {
				b.Fatal(err)
			}
			alloc[i] = time.Since(start)
		}
		var (
			wg sync.WaitGroup
			mu sync.Mutex
		)
		for i, p := range all {
			wg.Go(func() {
				start := time.Now()
				if _, err := n.StartContainer(p, "main"); err != nil {
					b.Error(err)
				}
				d := alloc[i] + time.Since(start)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			})
		}
		wg.Wait()
		n.Clear()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	slices.Sort(lat)
	b.ReportMetric(ms(lat[len(lat)/2]), "kubelet-p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "kubelet-p99-ms")
	// Allocate and PreStartContainer are called once per container, in
	// the same order of containers per round only by chance: sum them by
	// rank, which bounds the per-container sum's percentiles from above.
	omu.Lock()
	defer omu.Unlock()
	if len(allocs) != len(prestarts) || len(allocs) == 0 {
		b.Fatalf("%d Allocate and %d PreStartContainer calls", len(allocs), len(prestarts))
	}
	slices.Sort(allocs)
	slices.Sort(prestarts)
	both := make([]time.Duration, len(allocs))
	for i := range both {
		both[i] = allocs[i] + prestarts[i]
	}
	b.ReportMetric(ms(both[len(both)/2]), "plugin-p50-ms")
	b.ReportMetric(ms(both[len(both)*99/100]), "plugin-p99-ms")
	b.ReportMetric(ms(allocs[len(allocs)*99/100]), "allocate-p99-ms")
	b.ReportMetric(ms(prestarts[len(prestarts)*99/100]), "prestart-p99-ms")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
