package podresources

import (
	"context"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// limited is a PodResources server that, as the kubelet over its rate
// limit, refuses the first calls with ResourceExhausted.
type limited struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	refuse int32
	calls  atomic.Int32
	msg    string
}

func (s *limited) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	if s.calls.Add(1) <= s.refuse {
		return nil, status.Error(codes.ResourceExhausted, s.msg)
	}
	return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{
		Name: "p", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{Name: "c",
			Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "gpushare.io/gpu-hook", DeviceIds: []string{"hook-1"}}}}}}}}, nil
}

func serve(t *testing.T, s *limited) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, s)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	c, err := Dial(klog.Background(), sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRateLimited: a listing the kubelet refuses over its rate limit is
// asked again until it is answered; a ResourceExhausted that says the
// answer is too large is not.
func TestRateLimited(t *testing.T) {
	s := &limited{refuse: 5, msg: "rejected by rate limit"}
	l, err := serve(t, s).List(context.Background(), time.Time{})
	if err != nil {
		t.Fatalf("List after %d refusals: %v", s.refuse, err)
	}
	if got := s.calls.Load(); got != s.refuse+1 {
		t.Errorf("%d calls; want %d", got, s.refuse+1)
	}
	if h, err := l.Find("gpushare.io/gpu-hook", []string{"hook-1"}); err != nil || h.Pod != "p" {
		t.Errorf("Find(hook-1) = %+v, %v; want pod p", h, err)
	}

	big := &limited{refuse: 100, msg: "grpc: received message larger than max (300000000 vs. 268435456)"}
	if _, err := serve(t, big).List(context.Background(), time.Time{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("List of an answer too large: %v; want ResourceExhausted", err)
	}
	if got := big.calls.Load(); got != 1 {
		t.Errorf("an answer too large was asked %d times; want once", got)
	}
}
