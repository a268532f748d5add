package cdi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"testing"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// A claim names the CDI device in the kubelet's checkpoint of Allocate,
// so it must not change between versions of the daemon: the first 10
// bytes of the SHA-256 of the resource name and the sorted IDs, each
// after a zero byte, in hex.
func TestClaimStable(t *testing.T) {
	ids := []string{"1-7", "0-12", "0-3", "1-10"}
	h := sha256.New()
	for _, part := range []string{"gpushare.io/gpu-mem", "\x000-12", "\x000-3", "\x001-10", "\x001-7"} {
		h.Write([]byte(part))
	}
	want := hex.EncodeToString(h.Sum(nil)[:10])
	if got := ClaimOf("gpushare.io/gpu-mem", ids); got != want {
		t.Errorf("ClaimOf = %s, want %s", got, want)
	}
	if !slices.Equal(ids, []string{"1-7", "0-12", "0-3", "1-10"}) {
		t.Errorf("ClaimOf reordered its argument: %v", ids)
	}
}

// A staged spec says what the hand-declared spec of earlier versions
// said: cdiVersion 0.6.0, the kind, one device named after the claim with
// the container's environment and mounts; and the device node of each of
// its GPUs that has one, at /dev/<its name>.
func TestStageSpec(t *testing.T) {
	dir := t.TempDir()
	a := &gpusharev1.ContainerAllocation{GPUs: []gpusharev1.GPUShare{{Index: 1, UUID: "GPU-1", MemoryMiB: 1024, Compute: 50}}}
	mps := &MPS{PipeDir: "/tmp/nvidia-mps", ShmDir: "/run/gpushare/mps-shm"}
	claim := ClaimOf("keti.com/mpsgpu", []string{"1-0"})
	nodes := map[string]string{"GPU-1": "/run/sim/nvidia1", "GPU-2": "/run/sim/nvidia2"}
	path, err := Stage(dir, claim, GPUEdits(a, mps, nodes))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	env := []any{}
	for _, e := range Env(a, mps) {
		env = append(env, e)
	}
	want := map[string]any{
		"cdiVersion": "0.6.0",
		"kind":       Kind,
		"devices": []any{map[string]any{"name": claim, "containerEdits": map[string]any{
			"env": env,
			"deviceNodes": []any{
				map[string]any{"path": "/dev/nvidia1", "hostPath": "/run/sim/nvidia1"},
			},
			"mounts": []any{
				map[string]any{"hostPath": mps.PipeDir, "containerPath": mps.PipeDir, "options": []any{"rbind", "rw"}},
				map[string]any{"hostPath": mps.ShmDir, "containerPath": "/dev/shm", "options": []any{"rbind", "rw", "nosuid", "nodev"}},
			},
		}}},
		// specs-go writes the spec-wide edits, none.
		"containerEdits": map[string]any{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("staged spec:\n%s\nwant %v", b, want)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("staged spec: %v, %v; want mode 0644", info, err)
	}
}
