package extender

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/decision"
)

// BenchmarkFilter is one filter call as kube-scheduler makes it at 5000
// nodes (make bench-scheduler's cluster: 8 x 80 GiB GPUs per node, pods
// of 2-20 GiB): the pod, which the extender's informer holds, and the
// names of the 500 nodes it looks for, in a window that moves on by 500
// each call, through the HTTP handler. 10,000 pods are booked first, by
// the extender's own choices.
func BenchmarkFilter(b *testing.B) {
	b.Run("warm", func(b *testing.B) { benchmarkFilter(b, false) })
	// cold evicts the CPU's caches before each call, a model of the
	// other processes of a busy control-plane machine between two filter
	// calls: what the call costs in memory reads of the cache's nodes.
	b.Run("cold", func(b *testing.B) { benchmarkFilter(b, true) })
}

func benchmarkFilter(b *testing.B, cold bool) {
	const nodes, feasible, pods, gpuMiB = 5000, 500, 10000, 81920
	ts := newTestServer(b)
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
		n, err := controlplane.NodeSpec{Name: names[i], Model: "NVIDIA H100", MemoryMiB: gpuMiB, Count: 8}.Node()
		if err != nil {
			b.Fatal(err)
		}
		ts.Cache.SetNode(n)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	ts.Pods = corelisters.NewPodLister(indexer)
	ts.handler = ts.Handler()
	sizes := []int64{2048, 4096, 8192, 10240, 20480}
	rng := rand.New(rand.NewPCG(42, 1))
	next := 0
	// body returns pod i's filter call, with the pod in the informer.
	body := func(i int) ([]byte, *corev1.Pod) {
		p := pod(fmt.Sprintf("pod-%d", i), sizes[rng.IntN(len(sizes))])
		p.ResourceVersion = strconv.Itoa(i + 1)
		if err := indexer.Add(p); err != nil {
			b.Fatal(err)
		}
		window := make([]string, feasible)
		for k := range window {
			window[k] = names[(next+k)%nodes]
		}
		next = (next + feasible) % nodes
		raw, err := json.Marshal(extenderv1.ExtenderArgs{Pod: p, NodeNames: &window})
		if err != nil {
			b.Fatal(err)
		}
		return raw, p
	}
	for i := range pods {
		raw, p := body(i)
		w := ts.post("filter", raw)
		var res extenderv1.ExtenderFilterResult
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &res) != nil || res.NodeNames == nil || len(*res.NodeNames) != 1 {
			b.Fatalf("filter of pod %d: %d %s", i, w.Code, w.Body)
		}
		req, err := decision.Request(ts.Model, p)
		if err != nil {
			b.Fatal(err)
		}
		placer, err := decision.Placer(ts.Policy, p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ts.Cache.PlaceAndAssume(p.UID, placer, (*res.NodeNames)[0], req); err != nil {
			b.Fatal(err)
		}
	}
	calls := make([][]byte, 1000)
	for i := range calls {
		calls[i], _ = body(pods + i)
	}
	// Larger than any CPU cache this runs on. It stays in the Go heap,
	// where it raises the collector's goal: the cold case collects less
	// often than the warm one.
	var evict []byte
	if cold {
		evict = make([]byte, 256<<20)
	}
	i := 0
	for b.Loop() {
		if cold {
			b.StopTimer()
			for k := 0; k < len(evict); k += 64 {
				evict[k]++
			}
			b.StartTimer()
		}
		if w := ts.post("filter", calls[i%len(calls)]); w.Code != http.StatusOK {
			b.Fatalf("filter: %d %s", w.Code, w.Body)
		}
		i++
	}
}
