package cdi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// Kind is the CDI kind of the devices the plugin names in Allocate.
const Kind = "gpushare.io/container"

// specVersion is the cdiVersion of the specs written: the oldest that has
// what they use.
const specVersion = "0.6.0"

// ClaimOf names the allocation of ids of resource: IDs of one resource are
// held by one container at a time, so the name is unique among the
// node's running containers.
func ClaimOf(resource string, ids []string) string {
	sorted := ids
	if !slices.IsSorted(ids) {
		sorted = slices.Sorted(slices.Values(ids))
	}
	// One buffer, hashed at once: a thousand small writes would each
	// allocate.
	n := len(resource)
	for _, id := range sorted {
		n += 1 + len(id)
	}
	b := make([]byte, 0, n)
	b = append(b, resource...)
	for _, id := range sorted {
		b = append(b, 0)
		b = append(b, id...)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:claimLen/2])
}

// claimLen is the length of a claim: 10 bytes of the hash, in hex.
const claimLen = 20

// MPS configures the environment of containers on GPUs shared under MPS.
type MPS struct {
	// PipeDir is the MPS control daemon's pipe directory on the host; it
	// is mounted at the same path in the container.
	PipeDir string
	// LogDir is the daemon's log directory.
	LogDir string
	// ShmDir, if set, is the MPS daemon's /dev/shm on the host; it is
	// mounted at /dev/shm in the container, in place of the container's
	// own, so that the container needs no hostIPC.
	ShmDir string
}

// Env returns what a container with allocation c sees: its GPUs and, for
// frameworks that read them, its shares; under MPS the client limits sized
// from its own request.
func Env(c *gpusharev1.ContainerAllocation, mps *MPS) []string {
	var uuids, mem, compute, limits []string
	minCompute := int64(100)
	for i, g := range c.GPUs {
		uuids = append(uuids, g.UUID)
		mem = append(mem, strconv.FormatInt(g.MemoryMiB, 10))
		compute = append(compute, strconv.FormatInt(g.Compute, 10))
		if g.MemoryMiB > 0 {
			// Ordinals as the container sees them: its GPUs renumbered
			// from 0 in NVIDIA_VISIBLE_DEVICES order.
			limits = append(limits, fmt.Sprintf("%d=%dM", i, g.MemoryMiB))
		}
		minCompute = min(minCompute, g.Compute)
	}
	env := []string{
		"NVIDIA_VISIBLE_DEVICES=" + strings.Join(uuids, ","),
		"GPUSHARE_GPU_UUIDS=" + strings.Join(uuids, ","),
		"GPUSHARE_GPU_MEMORY_MIB=" + strings.Join(mem, ","),
		"GPUSHARE_GPU_COMPUTE_PERCENT=" + strings.Join(compute, ","),
	}
	if mps != nil {
		env = append(env, "CUDA_MPS_PIPE_DIRECTORY="+mps.PipeDir)
		if mps.LogDir != "" {
			env = append(env, "CUDA_MPS_LOG_DIRECTORY="+mps.LogDir)
		}
		if len(limits) > 0 {
			env = append(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+strings.Join(limits, ","))
		}
		if minCompute > 0 && minCompute < 100 {
			env = append(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+strconv.FormatInt(minCompute, 10))
		}
	}
	return env
}

// GPUEdits gives a container with allocation c its GPUs: the environment
// (Env), the GPUs' device nodes (nodes maps a GPU's UUID to its device
// node on the host, given in the container at /dev/<its name>) and
// under MPS the daemon's directories.
func GPUEdits(c *gpusharev1.ContainerAllocation, mps *MPS, nodes map[string]string) specs.ContainerEdits {
	e := specs.ContainerEdits{Env: Env(c, mps)}
	for _, g := range c.GPUs {
		if host := nodes[g.UUID]; host != "" {
			e.DeviceNodes = append(e.DeviceNodes, &specs.DeviceNode{Path: "/dev/" + filepath.Base(host), HostPath: host})
		}
	}
	if mps != nil {
		e.Mounts = []*specs.Mount{{HostPath: mps.PipeDir, ContainerPath: mps.PipeDir, Options: []string{"rbind", "rw"}}}
		if mps.ShmDir != "" {
			e.Mounts = append(e.Mounts,
				&specs.Mount{HostPath: mps.ShmDir, ContainerPath: "/dev/shm", Options: []string{"rbind", "rw", "nosuid", "nodev"}})
		}
	}
	return e
}

// HookedEdits are those of the claims of a container that holds hooks,
// other than the hooks' own: the hooks' claim gives the container its
// GPUs, and one CDI device's edits must neither repeat another's nor
// contradict them. A CDI device must change something: it says how the
// container gets its GPUs.
func HookedEdits() specs.ContainerEdits {
	return specs.ContainerEdits{Env: []string{"GPUSHARE_GPUS_VIA=" + gpusharev1.HookResource}}
}

// Stage writes the CDI spec of claim, edits e, into a file of its own in
// dir, which runtimes do not read, and returns its path: renamed to
// SpecPath, it takes effect at once.
func Stage(dir, claim string, e specs.ContainerEdits) (string, error) {
	return StageSpec(dir, &specs.Spec{Kind: Kind, Devices: []specs.Device{{Name: claim, ContainerEdits: e}}})
}

// StageSpec writes spec s (its version set here) into a file of its own
// in dir, which runtimes do not read, and returns its path: renamed to
// a .json name, it takes effect at once.
func StageSpec(dir string, s *specs.Spec) (string, error) {
	s.Version = specVersion
	name := s.Kind
	if len(s.Devices) > 0 {
		name = s.Devices[0].Name
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding the CDI spec of %s: %w", name, err)
	}
	// Not a .json or .yaml name: runtimes read only those.
	f, err := os.CreateTemp(dir, stagedPrefix+name+"-*"+stagedSuffix)
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if err == nil {
		// Read by the container runtime.
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// The name of a staged spec: stagedPrefix, the claim, a random part,
// stagedSuffix.
const (
	stagedPrefix = ".gpushare-"
	stagedSuffix = ".tmp"
)

// SpecPath is where the CDI spec of claim is written.
func SpecPath(dir, claim string) string {
	return filepath.Join(dir, "gpushare-"+claim+".json")
}

// specClaim returns the claim whose spec file (SpecPath) is named name;
// "" if it is not one.
func specClaim(name string) string {
	claim, ok := strings.CutPrefix(name, "gpushare-")
	if !ok {
		return ""
	}
	claim, ok = strings.CutSuffix(claim, ".json")
	if _, err := hex.DecodeString(claim); !ok || err != nil || len(claim) != claimLen {
		return ""
	}
	return claim
}
