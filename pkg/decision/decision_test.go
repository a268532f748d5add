package decision_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/decision"
	"github.com/gpushare/gpushare/pkg/resource"
)

// TestRankScore: the best gets the top of the scale and the others step
// down from half of it to 0, on the plugin's scale (100) and the
// extender's (10).
func TestRankScore(t *testing.T) {
	for _, c := range []struct {
		n    int
		top  int64
		want []int64
	}{
		{1, 100, []int64{100}},
		{2, 100, []int64{100, 0}},
		{3, 100, []int64{100, 25, 0}},
		{5, 100, []int64{100, 37, 25, 12, 0}},
		{3, 10, []int64{10, 2, 0}},
		{6, 10, []int64{10, 4, 3, 2, 1, 0}},
	} {
		got := make([]int64, c.n)
		for rank := range got {
			got[rank] = decision.RankScore(rank, c.n, c.top)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%d nodes on a scale of %d: %v, want %v", c.n, c.top, got, c.want)
		}
	}
}

// TestRank: nodes go best first by score, then by the higher tie-break.
func TestRank(t *testing.T) {
	rated := []decision.Rated{
		{Node: "a", Rating: alloc.Rating{Score: alloc.Score{Primary: 1}, Tie: 9}},
		{Node: "b", Rating: alloc.Rating{Score: alloc.Score{Primary: 2}, Tie: 1}},
		{Node: "c", Rating: alloc.Rating{Score: alloc.Score{Primary: 1, Secondary: 1}, Tie: 0}},
		{Node: "d", Rating: alloc.Rating{Score: alloc.Score{Primary: 1}, Tie: 10}},
	}
	decision.Rank(rated)
	var got []string
	for _, r := range rated {
		got = append(got, r.Node)
	}
	if want := []string{"b", "c", "d", "a"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// TestRankScores: the scores follow Rank's order, each in its rating's
// place, on random ratings with ties in score; Best is Rank's first.
func TestRankScores(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ranker decision.Ranker
	for n := range 60 {
		ratings := make([]alloc.Rating, n)
		rated := make([]decision.Rated, n)
		for i := range ratings {
			ratings[i] = alloc.Rating{Score: alloc.Score{Primary: rng.Int64N(4), Secondary: rng.Int64N(3)}, Tie: rng.Uint64()}
			rated[i] = decision.Rated{Node: fmt.Sprint(i), Rating: ratings[i]}
		}
		decision.Rank(rated)
		want := make([]int64, n)
		for rank, r := range rated {
			var i int
			_, _ = fmt.Sscan(r.Node, &i)
			want[i] = decision.RankScore(rank, n, 100)
		}
		if got := decision.RankScores(ratings, 100); !slices.Equal(got, want) {
			t.Fatalf("%d ratings: %v, want %v", n, got, want)
		}
		// One Ranker for every n, as the plugin reuses them: what it kept
		// from earlier calls changes nothing.
		got := make([]int64, n)
		ranker.RankScores(ratings, 100, got)
		if !slices.Equal(got, want) {
			t.Fatalf("%d ratings, reused Ranker: %v, want %v", n, got, want)
		}
		shuffled := slices.Clone(rated)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if best := decision.Best(shuffled); n > 0 && best != rated[0] {
			t.Fatalf("%d ratings: Best %v, want Rank's first %v", n, best, rated[0])
		}
	}
	if best := decision.Best(nil); best != (decision.Rated{}) {
		t.Errorf("Best of none: %v, want the zero Rated", best)
	}
}

func TestReasons(t *testing.T) {
	if got := decision.Reason(&alloc.Unfit{Reasons: []alloc.Insufficiency{{Reason: alloc.ReasonGPUMemory}, {Reason: alloc.ReasonGPUTooSmall}}}); got != string(alloc.ReasonGPUMemory) {
		t.Errorf("Reason = %q, want the first", got)
	}
	if got := decision.Reason(&alloc.Unfit{}); got != string(alloc.ReasonNodeRejected) {
		t.Errorf("Reason of no reasons = %q, want %q", got, alloc.ReasonNodeRejected)
	}
	if r, ok := decision.OutsideReason(fmt.Errorf("node n1: %w", gpucache.ErrDaemonDown)); r != decision.ReasonDaemonDown || !ok {
		t.Errorf("daemon down: %q, %v; want %q, resolvable", r, ok, decision.ReasonDaemonDown)
	}
	if r, ok := decision.OutsideReason(gpucache.ErrNodeGone); r != decision.ReasonNotGPUShareNode || ok {
		t.Errorf("node gone: %q, %v; want %q, for good", r, ok, decision.ReasonNotGPUShareNode)
	}
}

// TestRequest: a pod without GPUs asks nothing; a GPU pod's request
// leaves CPU and memory to kube-scheduler.
func TestRequest(t *testing.T) {
	args, err := v1alpha1.LoadArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	model, err := resource.New(args.ResourceModel)
	if err != nil {
		t.Fatal(err)
	}
	cpu := corev1.ResourceList{corev1.ResourceCPU: k8sresource.MustParse("2"), corev1.ResourceMemory: k8sresource.MustParse("1Gi")}
	plain := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: cpu}}}}}
	if req, err := decision.Request(model, plain); req != nil || err != nil {
		t.Errorf("pod without GPUs: %v, %v; want nil, nil", req, err)
	}
	gpu := plain.DeepCopy()
	gpu.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(1024, k8sresource.DecimalSI)}
	req, err := decision.Request(model, gpu)
	// CPU and memory stay: the fragmentation-aware policies weigh them.
	if err != nil || req == nil || !req.GPUs() || req.CPUMilli != 2000 || req.MemoryMiB != 1024 {
		t.Errorf("GPU pod: %+v, %v; want GPUs, 2000m CPU and 1024 MiB", req, err)
	}
}

// BenchmarkRankScores ranks the 500 nodes kube-scheduler scores per pod
// at 5000 nodes.
func BenchmarkRankScores(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	ratings := make([]alloc.Rating, 500)
	for i := range ratings {
		ratings[i] = alloc.Rating{Score: alloc.Score{Primary: rng.Int64N(1e6), Secondary: rng.Int64N(3)}, Tie: rng.Uint64()}
	}
	var ranker decision.Ranker
	out := make([]int64, len(ratings))
	for b.Loop() {
		ranker.RankScores(ratings, 100, out)
	}
}
