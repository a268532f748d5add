package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWarnStale: a resource the daemon does not serve that the node still
// advertises (at capacity 0, as the kubelet leaves a device plugin
// resource gone) is logged once, with the command that removes it, and
// again only after it was gone and came back.
func TestWarnStale(t *testing.T) {
	var logged []string
	logger := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	check := warnStale(logger, map[string]error{"gpushare.io/gpu-mem": errors.New("too many devices")})
	node := func(capacity corev1.ResourceList) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0"}, Status: corev1.NodeStatus{Capacity: capacity}}
	}
	stale := node(corev1.ResourceList{"gpushare.io/gpu-mem": k8sresource.MustParse("0"), "aliyun.com/gpu-mem": k8sresource.MustParse("1128")})
	check(stale)
	check(stale)
	if len(logged) != 1 || !strings.Contains(logged[0], `"resource"="gpushare.io/gpu-mem"`) ||
		!strings.Contains(logged[0], `kubectl patch node gpu-0 --subresource=status --type=json -p '[{\"op\":\"remove\",\"path\":\"/status/capacity/gpushare.io~1gpu-mem\"}]'`) {
		t.Fatalf("logged %q; want one error naming gpushare.io/gpu-mem and the patch that removes it", logged)
	}
	check(node(corev1.ResourceList{"aliyun.com/gpu-mem": k8sresource.MustParse("1128")}))
	check(stale)
	if len(logged) != 2 {
		t.Errorf("logged %d times; want again once the resource came back", len(logged))
	}
}
