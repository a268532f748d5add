package cdi

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// Where HAMi-core's files are in a container, as HAMi's device plugin
// mounts them: the library, the preload list naming it, and the lock
// directory its processes share.
const (
	HAMiCoreLibraryPath = "/usr/local/vgpu/libvgpu.so"
	HAMiCorePreloadPath = "/etc/ld.so.preload"
	HAMiCoreLockDir     = "/tmp/vgpulock"
)

// HAMiCore configures enforcement by HAMi-core (libvgpu.so), which the
// dynamic loader preloads into every process of a container: it counts
// the container's GPU memory and throttles its kernels, and refuses
// allocations past CUDA_DEVICE_MEMORY_LIMIT_<i> (of the container's i-th
// GPU) and compute past CUDA_DEVICE_SM_LIMIT percent.
type HAMiCore struct {
	// Library is libvgpu.so on the host, as the operator installed it
	// (HAMi installs it in /usr/local/vgpu).
	Library string
	// Preload is a file on the host that lists HAMiCoreLibraryPath: it is
	// mounted at /etc/ld.so.preload, so that the loader preloads the
	// library whatever the image's environment (PreloadContent).
	Preload string
	// LockDir is a directory on the host that every such container shares
	// at HAMiCoreLockDir: HAMi-core's lock, and each container's usage
	// cache (CUDA_DEVICE_MEMORY_SHARED_CACHE, named after its claim).
	LockDir string
}

// PreloadContent is what the Preload file holds.
const PreloadContent = HAMiCoreLibraryPath + "\n"

// Edits returns what a container with allocation c, named claim, gets
// for HAMi-core to hold it to its share: the limits in HAMi-core's units
// (memory in MiB as "<n>m", compute in percent; the smallest of the
// container's GPUs, as CUDA_DEVICE_SM_LIMIT is one for all), and the
// library, the preload list and the lock directory, mounted.
func (h *HAMiCore) Edits(c *gpusharev1.ContainerAllocation, claim string) specs.ContainerEdits {
	var env []string
	compute := int64(100)
	for i, g := range c.GPUs {
		if g.MemoryMiB > 0 {
			env = append(env, fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d=%dm", i, g.MemoryMiB))
		}
		compute = min(compute, g.Compute)
	}
	if compute > 0 && compute < 100 {
		env = append(env, "CUDA_DEVICE_SM_LIMIT="+strconv.FormatInt(compute, 10))
	}
	env = append(env, "CUDA_DEVICE_MEMORY_SHARED_CACHE="+HAMiCoreLockDir+"/"+claim+".cache")
	return specs.ContainerEdits{Env: env, Mounts: []*specs.Mount{
		{HostPath: h.Library, ContainerPath: HAMiCoreLibraryPath, Options: []string{"bind", "ro"}},
		{HostPath: h.Preload, ContainerPath: HAMiCorePreloadPath, Options: []string{"bind", "ro"}},
		{HostPath: h.LockDir, ContainerPath: HAMiCoreLockDir, Options: []string{"rbind", "rw"}},
	}}
}

// HAMiCoreHooks are functions HAMi-core's library must export to hold a
// process to its share: the allocation it counts and refuses past the
// memory limit, and the kernel launch it delays past the compute limit.
// The dynamic loader resolves a process's calls to them in the preloaded
// library first.
var HAMiCoreHooks = []string{"cuMemAlloc_v2", "cuLaunchKernel"}

// CheckHAMiCoreLibrary checks that the file at path is a shared library
// that exports HAMiCoreHooks. A HAMi-core built with hidden symbols (a
// CMake Release build, -fvisibility=hidden) loads, logs that it
// initializes, and holds nothing: on an H100 with driver 580 such a build
// let a container with a 2048 MiB limit allocate 4096.
func CheckHAMiCoreLibrary(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("HAMi-core's library %s is not a shared library: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return fmt.Errorf("HAMi-core's library %s has no dynamic symbols: %w", path, err)
	}
	exported := make(map[string]bool, len(HAMiCoreHooks))
	for _, s := range syms {
		bind := elf.ST_BIND(s.Info)
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC &&
			(bind == elf.STB_GLOBAL || bind == elf.STB_WEAK) && elf.ST_VISIBILITY(s.Other) == elf.STV_DEFAULT {
			exported[s.Name] = true
		}
	}
	for _, name := range HAMiCoreHooks {
		if !exported[name] {
			return fmt.Errorf("HAMi-core's library %s does not export %s, so it intercepts nothing and holds no container to its share: "+
				"build HAMi-core as its build.sh does (its hooks exported), not as a CMake Release build (-fvisibility=hidden)", path, name)
		}
	}
	return nil
}

// FindHAMiCoreLibrary returns HAMi-core's library at path, or, where no
// file is there, the newest of the versioned files beside it (path.v2.9.0,
// path.2.8: HAMi's device plugin installs libvgpu.so.<version>, and only
// some versions also a plain libvgpu.so). The error says what it found.
func FindHAMiCoreLibrary(path string) (string, error) {
	info, err := os.Stat(path)
	if err == nil && info.Mode().IsRegular() {
		return path, nil
	}
	if err == nil {
		return "", fmt.Errorf("HAMi-core's library %s is not a regular file", path)
	}
	matches, _ := filepath.Glob(path + ".*")
	var found []string
	for _, m := range matches {
		if info, err := os.Stat(m); err == nil && info.Mode().IsRegular() && libraryVersion(strings.TrimPrefix(m, path+".")) != nil {
			found = append(found, m)
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("HAMi-core's library is not at %s, nor any %s.<version> beside it (%w)", path, filepath.Base(path), err)
	}
	slices.SortFunc(found, func(a, b string) int {
		return slices.Compare(libraryVersion(strings.TrimPrefix(a, path+".")), libraryVersion(strings.TrimPrefix(b, path+".")))
	})
	return found[len(found)-1], nil
}

// libraryVersion reads a library's version suffix, "v2.9.0" or "2.8":
// its numbers, nil if it is not one.
func libraryVersion(s string) []int {
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil
		}
		out[i] = n
	}
	return out
}
