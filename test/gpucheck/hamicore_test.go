//go:build gpucheck

package gpucheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
)

// hamiCorePart is the HAMi-core section: clients with the environment
// and mounts the CDI edits give a container that HAMi-core holds to its
// share (the node daemon's --enforcement=hami-core), with HAMi-core's
// library preloaded.
type hamiCorePart struct {
	part
	// Library is the libvgpu.so the clients preload.
	Library string `json:"library"`
	// Preload says how the library is preloaded.
	Preload string `json:"preload"`
	// Lock says which directory the clients share at /tmp/vgpulock.
	Lock     string `json:"lock"`
	Workload string `json:"workload"`
	shares
}

// HAMi-core's environment the CDI edits give, and its compute limit's
// variable.
const (
	hamiCorePrefix    = "CUDA_DEVICE_"
	hamiCoreThreadVar = "CUDA_DEVICE_SM_LIMIT"
	// envHAMiCore names HAMi-core's library on a real machine;
	// hamiCoreInstalled is where HAMi installs it, tried without.
	envHAMiCore       = "GPUSHARE_GPU_CHECK_HAMI_CORE"
	hamiCoreInstalled = "/usr/local/vgpu/libvgpu.so"
)

// hamiCoreThreadRange is how far from the expected slowdown a kernel
// under HAMi-core's CUDA_DEVICE_SM_LIMIT may be. HAMi-core does not
// limit a kernel's threads: it delays the kernel launches it intercepts
// until the GPU's utilization, sampled through NVML, falls under the
// limit, so the time scales loosely (3.43x measured for 4x, CUDA C on an
// H100). Kernels it does not intercept are not slowed at all (1.00x:
// CuPy's and PyTorch's cuBLAS products under CUDA 13), and fail.
var hamiCoreThreadRange = [2]float64{0.5, 2}

func checkHAMiCore(ctx context.Context, t *testing.T, m *machine, p *hamiCorePart) {
	defer p.end()
	if m.fake != nil {
		p.start(t, m.against(), "stand-in clients with the CDI edits' environment and mounts for HAMi-core (pkg/cdi), preloading a stand-in libvgpu.so that reads CUDA_DEVICE_MEMORY_LIMIT_0 as HAMi-core does and opens its lock; the client enforces the limit the library read; no compute to time")
	} else {
		p.start(t, m.against(), "CUDA clients with the CDI edits' environment and mounts for HAMi-core (pkg/cdi), preloading HAMi-core's libvgpu.so")
	}
	p.ThreadLimit.Status = "not run"
	if m.hamiCore == "" {
		p.shares.skip(&p.part, m.noHAMiCore)
		return
	}
	p.Library = m.hamiCore
	// What gpushare-node checks before it preloads the library.
	if err := cdi.CheckHAMiCoreLibrary(m.hamiCore); err != nil {
		p.ThreadLimit.Status = "not run: the library is refused"
		p.fail("%v", err)
		return
	}
	if m.work == nil {
		p.Workload = "skipped: " + m.noWork
		p.shares.skip(&p.part, m.noWork)
		return
	}
	p.Workload = m.work.desc
	g, err := m.target()
	if err != nil {
		p.fail("%v", err)
		return
	}
	dir := filepath.Join(m.dir, "hami-core")
	lock, binds, why := lockDir(filepath.Join(dir, "vgpulock"))
	p.Lock = why
	if err := os.MkdirAll(lock, 0o777|os.ModeSticky); err != nil {
		p.fail("HAMi-core's lock directory: %v", err)
		return
	}
	// In a container the loader reads the mounted /etc/ld.so.preload,
	// which names the mounted library (cmd/gpushare-node
	// TestHAMiCoreStandIn checks that through the kubelet's mounts);
	// here LD_PRELOAD names the library where it is, for the same
	// loader.
	p.Preload = "LD_PRELOAD=" + m.hamiCore + ", for the preload list the CDI edits mount at " + cdi.HAMiCorePreloadPath
	if m.hamiCore != cdi.HAMiCoreLibraryPath {
		p.Preload += "; CUDA_REDIRECT=" + m.hamiCore + ", for the library they mount at " + cdi.HAMiCoreLibraryPath
	}
	cfg := &cdi.HAMiCore{Library: m.hamiCore, Preload: filepath.Join(dir, "ld.so.preload"), LockDir: lock}
	mk := hamiCoreClient(g.Index, g.UUID, cfg, binds)
	p.check(ctx, &p.part, m.work, mk, hamiCorePrefix, hamiCoreThreadVar, hamiCoreThreadRange)
}

// lockDir is the host directory HAMi-core's clients share at
// /tmp/vgpulock, as the CDI edits mount the node daemon's: path of its
// own, bound there, as root with unshare; else the node's /tmp/vgpulock
// itself. It says which.
func lockDir(path string) (string, []bind, string) {
	_, err := exec.LookPath("unshare")
	switch {
	case os.Geteuid() != 0:
		return cdi.HAMiCoreLockDir, nil, "the node's " + cdi.HAMiCoreLockDir + ": not root, cannot bind a directory there"
	case err != nil:
		return cdi.HAMiCoreLockDir, nil, "the node's " + cdi.HAMiCoreLockDir + ": no unshare to bind a directory there"
	}
	return path, []bind{{host: path, at: cdi.HAMiCoreLockDir}},
		"a directory of its own bound at " + cdi.HAMiCoreLockDir + ", as the CDI edits mount the node daemon's"
}

// hamiCoreClient is what a container that HAMi-core holds to its share
// gets from the CDI edits: its GPU's environment and HAMi-core's, with
// the lock directory bound as binds say. The library and the preload
// list are not mounted: LD_PRELOAD names the library on the host.
func hamiCoreClient(index int, uuid string, cfg *cdi.HAMiCore, binds []bind) clientOf {
	return func(name string, memMiB, compute int64) ([]string, []bind, error) {
		c := &gpusharev1.ContainerAllocation{Name: name, Kind: gpusharev1.ContainerApp,
			GPUs: []gpusharev1.GPUShare{{Index: index, UUID: uuid, MemoryMiB: memMiB, Compute: compute}}}
		edits := cdi.GPUEdits(c, nil, nil)
		h := cfg.Edits(c, "gpu-check-"+name)
		for _, mnt := range h.Mounts {
			switch mnt.ContainerPath {
			case cdi.HAMiCoreLibraryPath, cdi.HAMiCorePreloadPath:
			case cdi.HAMiCoreLockDir:
				if mnt.HostPath != cfg.LockDir {
					return nil, nil, fmt.Errorf("the CDI edits mount %s at %s, not the lock directory %s", mnt.HostPath, mnt.ContainerPath, cfg.LockDir)
				}
			default:
				return nil, nil, fmt.Errorf("the CDI edits mount %s at %s: the check does not know what for", mnt.HostPath, mnt.ContainerPath)
			}
		}
		env := append(append(edits.Env, h.Env...), "CUDA_VISIBLE_DEVICES="+uuid, "LD_PRELOAD="+cfg.Library)
		if cfg.Library != cdi.HAMiCoreLibraryPath {
			// HAMi-core looks itself up where the CDI edits mount it,
			// unless CUDA_REDIRECT says where it is.
			env = append(env, "CUDA_REDIRECT="+cfg.Library)
		}
		return env, binds, nil
	}
}
