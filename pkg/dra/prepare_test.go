package dra

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/deviceplugin/runtimetest"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/refused"
)

// claimOf is a claim allocated devices of pool node-a, each consuming
// the given MiB (0: all) and percent.
func claimOf(uid, request string, devices map[string][2]int64) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c-" + uid, Namespace: "team", UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for dev, v := range devices {
		r := resourceapi.DeviceRequestAllocationResult{Request: request, Driver: Driver, Pool: "node-a", Device: dev}
		if v[0] > 0 {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]k8sresource.Quantity{
				Memory:  *k8sresource.NewQuantity(v[0]<<20, k8sresource.BinarySI),
				Compute: *k8sresource.NewQuantity(v[1], k8sresource.DecimalSI),
			}
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

func preparer(t *testing.T, mps *cdi.MPS) *Preparer {
	gpus := []gpu.Device{t4(0), t4(1)}
	// Character devices every machine has stand in for /dev/nvidia<minor>.
	gpus[0].DeviceNode, gpus[1].DeviceNode = "/dev/zero", "/dev/null"
	return &Preparer{Dir: t.TempDir(), Pool: "node-a", GPUs: func() []gpu.Device { return gpus }, MPS: mps}
}

// A prepared claim's containers get its GPUs as the device plugin's do:
// the GPUs' UUIDs and device nodes, their shares, and under MPS the
// limits sized from what the claim consumed. Preparing twice changes
// nothing; unpreparing removes the spec, also in a new Preparer (a
// restarted daemon), and a second unprepare is no error.
func TestPrepare(t *testing.T) {
	mps := &cdi.MPS{PipeDir: "/run/nvidia/mps"}
	p := preparer(t, mps)
	claim := claimOf("u1", "gpu", map[string][2]int64{"gpu-1": {4096, 30}})
	for range 2 {
		devs, err := p.Prepare(claim)
		if err != nil {
			t.Fatal(err)
		}
		if len(devs) != 1 || devs[0].DeviceName != "gpu-1" || devs[0].PoolName != "node-a" || len(devs[0].CDIDeviceIDs) != 1 ||
			devs[0].CDIDeviceIDs[0] != "gpu.gpushare.io/claim=u1-gpu" {
			t.Fatalf("prepared %+v; want gpu-1 with CDI device gpu.gpushare.io/claim=u1-gpu", devs)
		}
	}
	rt, err := runtimetest.New(p.Dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rt.Create([]string{"gpu.gpushare.io/claim=u1-gpu"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"NVIDIA_VISIBLE_DEVICES": t4(1).UUID, "GPUSHARE_GPU_MEMORY_MIB": "4096", "GPUSHARE_GPU_COMPUTE_PERCENT": "30",
		"CUDA_MPS_PIPE_DIRECTORY": "/run/nvidia/mps", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30"}
	for k, v := range want {
		if c.Env[k] != v {
			t.Errorf("container's %s = %q; want %q", k, c.Env[k], v)
		}
	}
	if held, err := p.Held(); err != nil || held["gpu-1"] != (Share{4096, 30}) || len(held) != 1 {
		t.Errorf("held %v, %v; want 4096 MiB and 30%% of gpu-1", held, err)
	}

	restarted := preparer(t, mps)
	restarted.Dir = p.Dir
	if held, err := restarted.Held(); err != nil || held["gpu-1"] != (Share{4096, 30}) {
		t.Errorf("after a restart: held %v, %v; want the claim's share read back from its spec", held, err)
	}
	for range 2 {
		if err := restarted.Unprepare("u1"); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(p.Dir, "*")); len(left) != 0 {
		t.Errorf("after unprepare: %v left", left)
	}
}

// Claims share a GPU up to its usable memory and compute: the one that
// would go past either is refused and nothing is written for it, and a
// claim whose request took no memory in parts takes the GPU whole.
func TestPrepareRefusesOvercommit(t *testing.T) {
	p := preparer(t, nil)
	for uid, mib := range map[string]int64{"a": 8192, "b": 6000} {
		if _, err := p.Prepare(claimOf(uid, "gpu", map[string][2]int64{"gpu-0": {mib, 0}})); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]*resourceapi.ResourceClaim{
		"memory":    claimOf("c", "gpu", map[string][2]int64{"gpu-0": {1024, 0}}),
		"whole GPU": claimOf("d", "gpu", map[string][2]int64{"gpu-0": {0, 0}}),
	} {
		_, err := p.Prepare(c)
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: %v; want refused, past the 14930 MiB usable", name, err)
		}
		if left, _ := filepath.Glob(filepath.Join(p.Dir, "*"+string(c.UID)+"-*")); len(left) != 0 {
			t.Errorf("%s: refused, and wrote %v", name, left)
		}
	}
	if _, err := p.Prepare(claimOf("e", "gpu", map[string][2]int64{"gpu-0": {700, 60}})); err != nil {
		t.Errorf("700 MiB more: %v; want it to fit", err)
	}
	if _, err := p.Prepare(claimOf("f", "gpu", map[string][2]int64{"gpu-1": {100, 50}})); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prepare(claimOf("g", "gpu", map[string][2]int64{"gpu-1": {100, 51}})); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("compute 50%% + 51%%: %v; want refused", err)
	}
}

// Prepare refuses what is not this node's to give: an unallocated claim,
// a device it does not have or that is unhealthy, a consumption not ours;
// and takes no part of another pool's or driver's results.
func TestPrepareBadClaims(t *testing.T) {
	p := preparer(t, nil)
	unallocated := claimOf("x", "gpu", nil)
	unallocated.Status.Allocation = nil
	other := claimOf("y", "gpu", map[string][2]int64{"gpu-0": {1024, 0}})
	other.Status.Allocation.Devices.Results[0].Pool = "node-b"
	other.Status.Allocation.Devices.Results = append(other.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: "net.example.com", Pool: "node-a", Device: "eth0"})
	if devs, err := p.Prepare(other); err != nil || len(devs) != 0 {
		t.Errorf("another pool's and driver's devices: %+v, %v; want none prepared, no error", devs, err)
	}
	sick := preparer(t, nil)
	gpus := sick.GPUs()
	gpus[1].Healthy = false
	sick.GPUs = func() []gpu.Device { return gpus }
	for name, c := range map[string]struct {
		p     *Preparer
		claim *resourceapi.ResourceClaim
		want  string
	}{
		"unallocated":    {p, unallocated, "not allocated"},
		"unknown device": {p, claimOf("z", "gpu", map[string][2]int64{"gpu-7": {1024, 0}}), "not a healthy GPU"},
		"unhealthy":      {sick, claimOf("w", "gpu", map[string][2]int64{"gpu-1": {1024, 0}}), "not a healthy GPU"},
		"over the GPU":   {p, claimOf("v", "gpu", map[string][2]int64{"gpu-0": {20000, 0}}), "whole number of MiB from 1 to 14930"},
	} {
		if _, err := c.p.Prepare(c.claim); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error saying %q", name, err, c.want)
		}
	}
	for _, uid := range []string{"", "../etc", `a\b`} {
		if err := p.Unprepare(uid); err == nil {
			t.Errorf("unprepare of claim UID %q: no error; want it refused", uid)
		}
	}
	// A spec file that is not ours to read stops Prepare rather than
	// being counted as nothing.
	if err := os.WriteFile(filepath.Join(p.Dir, "gpushare-dra-bad-gpu.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prepare(claimOf("u", "gpu", map[string][2]int64{"gpu-0": {1024, 0}})); err == nil {
		t.Error("a spec that cannot be read: Prepare went on; want an error")
	}
}

// A container whose record books a GPU that claims prepared first hold
// is refused where the two would take more than the GPU has, and let
// through where they fit or where no claim holds the GPU; what Prepare
// and Beside decide is seen by another Preparer on the same directory
// (gpushare-dra and gpushare-node are two processes).
func TestBeside(t *testing.T) {
	p := preparer(t, nil)
	if _, err := p.Prepare(claimOf("a", "gpu", map[string][2]int64{"gpu-0": {8192, 30}})); err != nil {
		t.Fatal(err)
	}
	node := &Preparer{Dir: p.Dir, Pool: p.Pool, GPUs: p.GPUs}
	a, b := t4(0).UUID, t4(1).UUID
	for _, tc := range []struct {
		name   string
		gpus   []string
		booked map[string]Share
		refuse bool
	}{
		{"fits beside the claim", []string{a}, map[string]Share{a: {6738, 70}}, false},
		{"memory past the GPU", []string{a}, map[string]Share{a: {6739, 0}}, true},
		{"compute past the GPU", []string{a}, map[string]Share{a: {1024, 71}}, true},
		{"on both GPUs, one past", []string{b, a}, map[string]Share{a: {12000, 0}, b: {12000, 0}}, true},
		{"no claim on its GPU", []string{b}, map[string]Share{a: {12000, 0}, b: {14930, 100}}, false},
		// Another container's over-booking on the claim's GPU is not
		// this one's to answer for.
		{"over-booked GPU not its own", []string{b}, map[string]Share{a: {12000, 0}, b: {1024, 0}}, false},
	} {
		err := node.Beside(tc.gpus, func() map[string]Share { return tc.booked })
		// The releaser knows the refusal by its words (refused.BesideWords).
		if got := err != nil && strings.Contains(err.Error(), "refused") && strings.Contains(err.Error(), refused.BesideWords) &&
			strings.Contains(err.Error(), "ResourceClaims prepared on it first (8192 MiB, 30%)"); got != tc.refuse || (err != nil) != tc.refuse {
			t.Errorf("%s: %v; want refused %v", tc.name, err, tc.refuse)
		}
	}
	if err := p.Unprepare("a"); err != nil {
		t.Fatal(err)
	}
	asked := false
	if err := node.Beside([]string{a}, func() map[string]Share { asked = true; return nil }); err != nil || asked {
		t.Errorf("no claim prepared: %v, the pods' bookings read %v; want no error, and them not read", err, asked)
	}
	if err := node.Beside([]string{a}, func() map[string]Share { return map[string]Share{a: {14930, 100}} }); err != nil {
		t.Errorf("the claim unprepared: %v; want the GPU whole for the pods", err)
	}
}

// Two holders of the CDI directory's lock (gpushare-dra's Prepare and
// gpushare-node's Beside, each its own open of the directory) take turns.
func TestLockDir(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		u, err := lockDir(dir)
		if err == nil {
			u()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the lock was taken again while held (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was not taken once released")
	}
}
