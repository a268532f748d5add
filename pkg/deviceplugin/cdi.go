package deviceplugin

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

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// CDIKind is the CDI kind of the devices the plugin names in Allocate.
const CDIKind = "gpushare.io/container"

// claimOf names the allocation of ids of resource: IDs of one resource are
// held by one container at a time, so the name is unique among the
// node's running containers.
func claimOf(resource string, ids []string) string {
	sorted := inOrder(ids)
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

// inOrder returns ids sorted: ids itself if they are, else a sorted copy.
func inOrder(ids []string) []string {
	if slices.IsSorted(ids) {
		return ids
	}
	return slices.Sorted(slices.Values(ids))
}

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

// spec is a CDI specification (cdiVersion 0.6.0) of one device.
type spec struct {
	CDIVersion string      `json:"cdiVersion"`
	Kind       string      `json:"kind"`
	Devices    []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string `json:"name"`
	ContainerEdits edits  `json:"containerEdits"`
}

type edits struct {
	Env    []string   `json:"env,omitempty"`
	Mounts []cdiMount `json:"mounts,omitempty"`
}

type cdiMount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Options       []string `json:"options,omitempty"`
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

// gpuEdits gives a container with allocation c its GPUs: the environment
// (Env) and under MPS the daemon's directories.
func gpuEdits(c *gpusharev1.ContainerAllocation, mps *MPS) edits {
	e := edits{Env: Env(c, mps)}
	if mps != nil {
		e.Mounts = []cdiMount{{HostPath: mps.PipeDir, ContainerPath: mps.PipeDir, Options: []string{"rbind", "rw"}}}
		if mps.ShmDir != "" {
			e.Mounts = append(e.Mounts,
				cdiMount{HostPath: mps.ShmDir, ContainerPath: "/dev/shm", Options: []string{"rbind", "rw", "nosuid", "nodev"}})
		}
	}
	return e
}

// hookedEdits are those of the claims of a container that holds hooks,
// other than the hooks' own: the hooks' claim gives the container its
// GPUs, and one CDI device's edits must neither repeat another's nor
// contradict them. A CDI device must change something: it says how the
// container gets its GPUs.
var hookedEdits = edits{Env: []string{"GPUSHARE_GPUS_VIA=" + gpusharev1.HookResource}}

// stageSpec writes the CDI spec of claim, edits e, into a file of its own in dir,
// which runtimes do not read, and returns its path: renamed to
// SpecPath, it takes effect at once.
func stageSpec(dir, claim string, e edits) (string, error) {
	d := cdiDevice{Name: claim, ContainerEdits: e}
	b, err := json.MarshalIndent(spec{CDIVersion: "0.6.0", Kind: CDIKind, Devices: []cdiDevice{d}}, "", "  ")
	if err != nil {
		return "", err
	}
	// Not a .json or .yaml name: runtimes read only those.
	f, err := os.CreateTemp(dir, ".gpushare-"+claim+"-*.tmp")
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

// errWriting says the CDI spec of h could not be written.
func errWriting(h holder, err error) error {
	return fmt.Errorf("writing the CDI spec of container %s of pod %s/%s: %w", h.Container, h.Namespace, h.Pod, err)
}

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
