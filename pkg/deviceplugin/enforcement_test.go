package deviceplugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/deviceplugin/runtimetest"
)

// hamiCoreFiles writes a HAMi-core configuration in a new directory:
// the library (a stand-in, or an empty file), the preload list and the
// lock directory, as gpushare-node does.
func hamiCoreFiles(t *testing.T, library string) *cdi.HAMiCore {
	t.Helper()
	dir := t.TempDir()
	h := &cdi.HAMiCore{Library: library, Preload: filepath.Join(dir, "ld.so.preload"), LockDir: filepath.Join(dir, "vgpulock")}
	if h.Library == "" {
		h.Library = filepath.Join(dir, "libvgpu.so")
		if err := os.WriteFile(h.Library, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(h.Preload, []byte(cdi.PreloadContent), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(h.LockDir, 0o777); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestEnforcement: what holds a container to its share, per node
// setting, through the kubelet and the runtime. A shared container is
// held by MPS or HAMi-core as the node says, or by nothing; a container
// that asks for MPS is an MPS client whatever the setting; a container of
// a whole GPU is held by neither.
func TestEnforcement(t *testing.T) {
	type held struct{ mps, hamiCore bool }
	for name, tc := range map[string]struct {
		enforcement gpusharev1.Enforcement
		want        map[string]held // by container: shared, mps, whole
	}{
		"none":      {gpusharev1.EnforcementNone, map[string]held{"shared": {}, "mps": {mps: true}, "whole": {}}},
		"mps":       {gpusharev1.EnforcementMPS, map[string]held{"shared": {mps: true}, "mps": {mps: true}, "whole": {}}},
		"hami-core": {gpusharev1.EnforcementHAMiCore, map[string]held{"shared": {hamiCore: true}, "mps": {mps: true}, "whole": {}}},
	} {
		t.Run(name, func(t *testing.T) {
			h := hamiCoreFiles(t, "")
			n := startNodeWith(t, func(c *testConfig) { c.Claims.Enforcement, c.Claims.HAMiCore = tc.enforcement, h })
			pods := map[string]*corev1Pod{
				"shared": n.pod("shared", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 0, mib: 3000, compute: 30}),
				"mps": n.pod("mps", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 0, mib: 2048, compute: 10,
					resource: "keti.com/mpsgpu", amount: 1}),
				"whole": n.pod("whole", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 1, mib: 16384, compute: 100,
					resource: "gpushare.io/gpu-count", amount: 1}),
			}
			for _, which := range []string{"shared", "mps", "whole"} {
				p := pods[which]
				if err := n.admit(p); err != nil {
					t.Fatal(err)
				}
				c, err := n.create(p, "main")
				if err != nil {
					t.Fatal(err)
				}
				w := tc.want[which]
				if _, ok := c.Env["CUDA_MPS_PIPE_DIRECTORY"]; ok != w.mps {
					t.Errorf("%s: MPS client %v, want %v (env %v)", which, ok, w.mps, c.Env)
				}
				_, preload := c.Mounts[cdi.HAMiCorePreloadPath]
				_, limit := c.Env["CUDA_DEVICE_MEMORY_LIMIT_0"]
				if preload != w.hamiCore || limit != w.hamiCore {
					t.Errorf("%s: HAMi-core preload %v, limit %v, want %v", which, preload, limit, w.hamiCore)
				}
				if w.hamiCore && (c.Mounts[cdi.HAMiCoreLibraryPath] != h.Library || c.Mounts[cdi.HAMiCoreLockDir] != h.LockDir ||
					c.Env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "3000m" || c.Env["CUDA_DEVICE_SM_LIMIT"] != "30") {
					t.Errorf("%s: mounts %v, env %v", which, c.Mounts, c.Env)
				}
			}
		})
	}
}

// TestHAMiCoreStandIn: a stand-in for HAMi-core's library, built here,
// is loaded as the container's dynamic loader would load it (the library
// /etc/ld.so.preload names, from where the container's mounts put it),
// and gets the container's limits in the units HAMi-core reads: each GPU's
// memory in bytes, compute in percent.
func TestHAMiCoreStandIn(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("a C compiler builds the stand-in (the project's cgo build needs one too): %v", err)
	}
	lib := filepath.Join(t.TempDir(), "libvgpu.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, "testdata/hamicore-standin.c").CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	h := hamiCoreFiles(t, lib)
	n := startNodeWith(t, func(c *testConfig) { c.Claims.Enforcement, c.Claims.HAMiCore = gpusharev1.EnforcementHAMiCore, h })
	p := n.pod("two", share{container: "main", kind: gpusharev1.ContainerApp, gpu: 1, mib: 5000, compute: 25})
	if err := n.admit(p); err != nil {
		t.Fatal(err)
	}
	c, err := n.create(p, "main")
	if err != nil {
		t.Fatal(err)
	}
	got := loadPreloaded(t, c)
	// 5000 MiB in bytes: HAMi-core reads "5000m" as MiB.
	want := []string{"loaded", "memory_limit_0=5242880000", "sm_limit=25", "shared_cache=" + c.Env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]}
	if !slices.Equal(got, want) {
		t.Errorf("the stand-in recorded %q, want %q", got, want)
	}
	if !strings.HasPrefix(c.Env["CUDA_DEVICE_MEMORY_SHARED_CACHE"], cdi.HAMiCoreLockDir+"/") {
		t.Errorf("usage cache %q is not in the shared lock directory", c.Env["CUDA_DEVICE_MEMORY_SHARED_CACHE"])
	}
}

// loadPreloaded runs a dynamically linked program as container c's
// loader would: with its environment and, preloaded, each library its
// /etc/ld.so.preload lists, found through its mounts. It returns what the
// stand-in recorded, line by line.
func loadPreloaded(t *testing.T, c *runtimetest.Container) []string {
	t.Helper()
	src, ok := c.Mounts[cdi.HAMiCorePreloadPath]
	if !ok {
		t.Fatalf("no %s in the container: mounts %v", cdi.HAMiCorePreloadPath, c.Mounts)
	}
	list, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var preload []string
	for _, path := range strings.Fields(string(list)) {
		host, ok := c.Mounts[path]
		if !ok {
			t.Fatalf("%s lists %s, which the container does not have: mounts %v", cdi.HAMiCorePreloadPath, path, c.Mounts)
		}
		preload = append(preload, host)
	}
	out := filepath.Join(t.TempDir(), "recorded")
	cmd := exec.Command("/bin/sh", "-c", "true")
	for k, v := range c.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "LD_PRELOAD="+strings.Join(preload, ":"), "GPUSHARE_STANDIN_OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("running with the preloaded library: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the stand-in recorded nothing: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}
