package claim

import (
	"errors"
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
)

func exact(class string, count int64, caps map[resourceapi.QualifiedName]string) *resourceapi.ExactDeviceRequest {
	e := &resourceapi.ExactDeviceRequest{DeviceClassName: class, Count: count}
	if caps != nil {
		e.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{}}
		for k, v := range caps {
			e.Capacity.Requests[k] = k8sresource.MustParse(v)
		}
	}
	return e
}

func claimOf(reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}}
}

func TestRequests(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  []alloc.ContainerRequest
		err   error
	}{
		{"a share", claimOf(resourceapi.DeviceRequest{Name: "gpu", Exactly: exact(Class, 0, map[resourceapi.QualifiedName]string{Memory: "3Gi"})}),
			[]alloc.ContainerRequest{{Name: "claim/c/gpu", Count: 1, MemoryMiB: 3072}}, nil},
		{"memory rounded up to MiB, compute", claimOf(resourceapi.DeviceRequest{Name: "gpu", Exactly: exact(Class, 1, map[resourceapi.QualifiedName]string{Memory: "1000000", Compute: "30"})}),
			[]alloc.ContainerRequest{{Name: "claim/c/gpu", Count: 1, MemoryMiB: 1, Compute: 30}}, nil},
		{"two GPUs of 2 GiB", claimOf(resourceapi.DeviceRequest{Name: "gpus", Exactly: exact(Class, 2, map[resourceapi.QualifiedName]string{Memory: "2Gi"})}),
			[]alloc.ContainerRequest{{Name: "claim/c/gpus", Count: 2, MemoryMiB: 4096}}, nil},
		{"no capacity: whole GPUs", claimOf(resourceapi.DeviceRequest{Name: "whole", Exactly: exact(Class, 2, nil)}),
			[]alloc.ContainerRequest{{Name: "claim/c/whole", Count: 2, Exclusive: true}}, nil},
		{"an MPS share", claimOf(resourceapi.DeviceRequest{Name: "gpu", Exactly: exact(MPSClass, 1, map[resourceapi.QualifiedName]string{Memory: "1Gi", Compute: "10"})}),
			[]alloc.ContainerRequest{{Name: "claim/c/gpu", Count: 1, MemoryMiB: 1024, Compute: 10, MPS: true}}, nil},
		{"another class is left out", claimOf(
			resourceapi.DeviceRequest{Name: "nic", Exactly: exact("nic.example.com", 1, nil)},
			resourceapi.DeviceRequest{Name: "gpu", Exactly: exact(Class, 1, map[resourceapi.QualifiedName]string{Memory: "1Gi"})}),
			[]alloc.ContainerRequest{{Name: "claim/c/gpu", Count: 1, MemoryMiB: 1024}}, nil},
		{"firstAvailable of gpushare's class", claimOf(resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: Class}}}),
			nil, ErrUnsupported},
		{"all devices", claimOf(resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: Class, AllocationMode: resourceapi.DeviceAllocationModeAll}}),
			nil, ErrUnsupported},
		{"compute past 100", claimOf(resourceapi.DeviceRequest{Name: "gpu", Exactly: exact(Class, 1, map[resourceapi.QualifiedName]string{Memory: "1Gi", Compute: "101"})}),
			nil, errAny},
		// What a claim charges (memory times count) cannot wrap.
		{"memory past 1 PiB", claimOf(resourceapi.DeviceRequest{Name: "gpu", Exactly: exact(Class, 1, map[resourceapi.QualifiedName]string{Memory: "9223372036854775807"})}),
			nil, errAny},
		{"a count past any node", claimOf(resourceapi.DeviceRequest{Name: "gpu", Exactly: exact(Class, 2251799813685248, map[resourceapi.QualifiedName]string{Memory: "8Gi"})}),
			nil, errAny},
		{"the most", claimOf(resourceapi.DeviceRequest{Name: "gpu", Exactly: exact(Class, 1024, map[resourceapi.QualifiedName]string{Memory: "1Pi"})}),
			[]alloc.ContainerRequest{{Name: "claim/c/gpu", Count: 1024, MemoryMiB: 1024 << 30}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Requests(tc.claim)
			if (err != nil) != (tc.err != nil) || err != nil && !errors.Is(tc.err, errAny) && !errors.Is(err, tc.err) {
				t.Fatalf("err %v; want %v", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v; want %+v", got, tc.want)
			}
		})
	}
}

var errAny = errors.New("any error")

func result(driver, pool, device string, caps map[resourceapi.QualifiedName]string) resourceapi.DeviceRequestAllocationResult {
	r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: pool, Device: device}
	if caps != nil {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]k8sresource.Quantity{}
		for k, v := range caps {
			r.ConsumedCapacity[k] = k8sresource.MustParse(v)
		}
	}
	return r
}

func allocated(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := claimOf()
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return c
}

// admin marks r as allocated with admin access.
func admin(r resourceapi.DeviceRequestAllocationResult) resourceapi.DeviceRequestAllocationResult {
	r.AdminAccess = new(true)
	return r
}

func TestHeld(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		node  string
		gpus  []GPU
		err   bool
	}{
		{"not allocated", claimOf(), "", nil, false},
		{"a share", allocated(result(Driver, "n1", "gpu-1", map[resourceapi.QualifiedName]string{Memory: "3Gi", Compute: "20"})),
			"n1", []GPU{{Index: 1, MemoryMiB: 3072, Compute: 20}}, false},
		{"a whole device", allocated(result(Driver, "n1", "gpu-0", nil)), "n1", []GPU{{Index: 0, Whole: true}}, false},
		{"two requests on one GPU add up", allocated(
			result(Driver, "n1", "gpu-2", map[resourceapi.QualifiedName]string{Memory: "1Gi"}),
			result(Driver, "n1", "gpu-2", map[resourceapi.QualifiedName]string{Memory: "2Gi"})),
			"n1", []GPU{{Index: 2, MemoryMiB: 3072}}, false},
		{"another driver's device only", allocated(result("nic.example.com", "n1", "eth0", nil)), "", nil, false},
		{"admin access holds nothing", allocated(admin(result(Driver, "n1", "gpu-0", nil))), "", nil, false},
		{"admin access beside a share", allocated(admin(result(Driver, "n1", "gpu-0", nil)),
			result(Driver, "n1", "gpu-1", map[resourceapi.QualifiedName]string{Memory: "1Gi"})),
			"n1", []GPU{{Index: 1, MemoryMiB: 1024}}, false},
		{"a device name gpushare never publishes", allocated(result(Driver, "n1", "gpu-01", nil)), "", nil, true},
		{"two pools", allocated(result(Driver, "n1", "gpu-0", nil), result(Driver, "n2", "gpu-0", nil)), "", nil, true},
		{"negative compute", allocated(result(Driver, "n1", "gpu-0", map[resourceapi.QualifiedName]string{Memory: "1Gi", Compute: "-1"})), "", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, gpus, err := Held(tc.claim)
			if (err != nil) != tc.err {
				t.Fatalf("err %v; want error %v", err, tc.err)
			}
			if node != tc.node || !reflect.DeepEqual(gpus, tc.gpus) {
				t.Errorf("got %q %+v; want %q %+v", node, gpus, tc.node, tc.gpus)
			}
		})
	}
}

func TestDeviceIndex(t *testing.T) {
	for name, want := range map[string]int{"gpu-0": 0, "gpu-7": 7, "gpu-12": 12, "gpu-": -1, "gpu-01": -1, "gpu--1": -1, "cpu-0": -1, "gpu-x": -1} {
		i, ok := DeviceIndex(name)
		if (want < 0) == ok || ok && i != want {
			t.Errorf("DeviceIndex(%q) = %d, %v; want %d", name, i, ok, want)
		}
	}
}

// Asks sees gpushare's classes in every form a request takes: exactly,
// allocationMode All, among firstAvailable's subrequests; not other
// classes.
func TestAsks(t *testing.T) {
	all := exact(Class, 0, nil)
	all.AllocationMode = resourceapi.DeviceAllocationModeAll
	for name, c := range map[string]struct {
		claim *resourceapi.ResourceClaim
		want  bool
	}{
		"exactly":     {claimOf(resourceapi.DeviceRequest{Name: "r", Exactly: exact(Class, 1, nil)}), true},
		"mps":         {claimOf(resourceapi.DeviceRequest{Name: "r", Exactly: exact(MPSClass, 1, nil)}), true},
		"all":         {claimOf(resourceapi.DeviceRequest{Name: "r", Exactly: all}), true},
		"first":       {claimOf(resourceapi.DeviceRequest{Name: "r", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "other"}, {Name: "b", DeviceClassName: Class}}}), true},
		"other":       {claimOf(resourceapi.DeviceRequest{Name: "r", Exactly: exact("gpu.nvidia.com", 1, nil)}), false},
		"other first": {claimOf(resourceapi.DeviceRequest{Name: "r", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "other"}}}), false},
		"no request":  {claimOf(), false},
	} {
		if got := Asks(c.claim); got != c.want {
			t.Errorf("%s: Asks = %v, want %v", name, got, c.want)
		}
	}
}
