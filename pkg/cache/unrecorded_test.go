package cache_test

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
)

// A pod bound to a gpushare node that asks for GPUs and carries no record
// is reported once, as ErrNoRecord; one that asks for none, one on a node
// outside gpushare and one not bound are not.
func TestUnrecordedPodReported(t *testing.T) {
	asks := func(pod *corev1.Pod) (*alloc.PodRequest, error) {
		if pod.Labels["gpu"] == "" {
			return &alloc.PodRequest{Key: pod.Name}, nil
		}
		return sharedRequest(pod.Name, "c0", 1024), nil
	}
	var reports []string
	r := &logRecorder{}
	c := cache.New(r.logger(), cache.Options{Requests: asks, Refused: func(p *corev1.Pod, err error) {
		if !errors.Is(err, cache.ErrNoRecord) {
			t.Errorf("%s reported with %v, want ErrNoRecord", p.Name, err)
		}
		reports = append(reports, p.Name)
	}})
	c.SetNode(gpuNode(t, "n1", 15360))
	pod := func(uid, node string, gpu bool) *corev1.Pod {
		p := podWith(uid, node, "")
		delete(p.Annotations, "gpushare.io/allocation")
		if gpu {
			p.Labels = map[string]string{"gpu": "yes"}
		}
		return p
	}
	for _, p := range []*corev1.Pod{pod("pinned", "n1", true), pod("pinned", "n1", true), pod("plain", "n1", false),
		pod("elsewhere", "cpu-node", true), pod("pending", "", true)} {
		c.SetPod(p)
	}
	if len(reports) != 1 || reports[0] != "pod-pinned" {
		t.Fatalf("reported %v, want pod-pinned once", reports)
	}
	// Assumed by the scheduler (another binder bound it first): its
	// record is on its way, nothing to report.
	if err := c.Assume("assumed", "default/pod-assumed", placement("n1", 0, 1024, 0)); err != nil {
		t.Fatal(err)
	}
	c.SetPod(pod("assumed", "n1", true))
	if len(reports) != 1 {
		t.Fatalf("reported %v, want the assumed pod left alone", reports)
	}
}
