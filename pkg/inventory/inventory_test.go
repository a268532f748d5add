package inventory

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpu/sim"
)

// The published inventory is what the scheduler's parser reads back, and
// a failed GPU shows as unhealthy; an unchanged inventory is not written
// again.
func TestPublish(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"keep": "me"}}})
	gpus, err := sim.New(&sim.Config{GPUs: []sim.Group{{Model: "NVIDIA H200", MemoryMiB: 143771, Count: 4, NUMANodes: 2, NVLink: "all"}}})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(patcher{client}, "n1", nil)
	publish := func() *gpusharev1.GPUInventory {
		t.Helper()
		devs, err := gpus.Devices()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Publish(ctx, From(devs, gpusharev1.ModeShared, false)); err != nil {
			t.Fatal(err)
		}
		n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels[gpusharev1.NodeLabel] != "true" || n.Labels["keep"] != "me" {
			t.Fatalf("labels %v: want gpushare=true added and the others kept", n.Labels)
		}
		inv, err := gpusharev1.ParseInventory(n.Annotations[gpusharev1.InventoryAnnotation])
		if err != nil {
			t.Fatal(err)
		}
		return inv
	}
	inv := publish()
	if len(inv.GPUs) != 4 || inv.GPUs[3].MemoryMiB != 143771 || inv.GPUs[3].NUMANode != 1 || !cmp.Equal(inv.GPUs[3].NVLinkPeers, []int{0, 1, 2}) {
		t.Fatalf("inventory %+v does not describe 4 H200s on 2 NUMA nodes joined by NVLink", inv.GPUs)
	}
	writes := len(client.Actions())
	publish()
	if patches := countPatches(client.Actions()[writes:]); patches != 0 {
		t.Errorf("an unchanged inventory was written again (%d patches)", patches)
	}
	if err := gpus.SetHealth(2, false, "XID 79"); err != nil {
		t.Fatal(err)
	}
	if inv := publish(); inv.GPUs[2].Healthy || !inv.GPUs[1].Healthy {
		t.Errorf("after GPU 2 failed: %+v", inv.GPUs)
	}
}

func countPatches(actions []clienttesting.Action) int {
	n := 0
	for _, a := range actions {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

// patcher patches nodes of a fake clientset.
type patcher struct{ client *fake.Clientset }

func (p patcher) PatchNode(ctx context.Context, name string, patch []byte) (*corev1.Node, error) {
	return p.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
}

// The node daemon's --mps marks every GPU; without it the field is left
// out of the JSON, as inventories had it before MPS was published.
func TestFromMPS(t *testing.T) {
	devs := []gpu.Device{{Index: 0, UUID: "GPU-0", Model: "Tesla T4", MemoryMiB: 15360, Healthy: true}}
	for _, mps := range []bool{false, true} {
		value, err := gpusharev1.Marshal(From(devs, gpusharev1.ModeShared, mps))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(value, `"mps":true`); got != mps {
			t.Errorf("--mps=%v: inventory %s", mps, value)
		}
		if !mps && strings.Contains(value, `"mps"`) {
			t.Errorf("without --mps the inventory names the field: %s", value)
		}
	}
}

// The inventory shows both the total and the usable memory, the latter
// only where it is known and less than the total.
func TestFromUsable(t *testing.T) {
	devs := []gpu.Device{
		{Index: 0, UUID: "GPU-0", Model: "Tesla T4", MemoryMiB: 15360, UsableMemoryMiB: 14911, Healthy: true},
		{Index: 1, UUID: "GPU-1", Model: "Tesla T4", MemoryMiB: 15360, Healthy: true},
		{Index: 2, UUID: "GPU-2", Model: "Tesla T4", MemoryMiB: 15360, UsableMemoryMiB: 15360, Healthy: true},
	}
	inv := From(devs, gpusharev1.ModeShared, false)
	for i, want := range []int64{14911, 0, 0} {
		if g := inv.GPUs[i]; g.MemoryMiB != 15360 || g.UsableMemoryMiB != want {
			t.Errorf("GPU %d: %d MiB, %d usable; want 15360 and %d", i, g.MemoryMiB, g.UsableMemoryMiB, want)
		}
	}
}

// The configured allowance is taken off only where the driver reports no
// reservation, and only when it leaves some memory.
func TestReserve(t *testing.T) {
	devs := []gpu.Device{
		{Index: 0, Model: "Tesla T4", MemoryMiB: 15360, UsableMemoryMiB: 14911}, // the driver's: kept
		{Index: 1, Model: "Tesla T4", MemoryMiB: 15360},                         // unknown: 15360-400
		{Index: 2, Model: "Tesla T4", MemoryMiB: 15360, UsableMemoryMiB: 15360}, // none reported: 15360-400
		{Index: 3, Model: "Tesla V100", MemoryMiB: 16384},                       // no allowance: unknown
		{Index: 4, Model: "Tiny", MemoryMiB: 100},                               // allowance ≥ memory: ignored
	}
	allowance := map[string]int64{"Tesla T4": 400, "Tiny": 100}
	got := Reserve(devs, func(model string) int64 { return allowance[model] })
	for i, want := range []int64{14911, 14960, 14960, 0, 0} {
		if got[i].UsableMemoryMiB != want {
			t.Errorf("GPU %d: %d usable, want %d", i, got[i].UsableMemoryMiB, want)
		}
	}
	if devs[1].UsableMemoryMiB != 0 {
		t.Error("Reserve changed its input")
	}
	// Published: 14960 of 15360 usable.
	if g := From(got, gpusharev1.ModeShared, false).GPUs[1]; g.UsableMemoryMiB != 14960 {
		t.Errorf("inventory: %d usable, want 14960", g.UsableMemoryMiB)
	}
}
