//go:build gpucheck

package gpucheck

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// inventoryPart is the inventory section: the GPUs as the node daemon's
// NVML backend lists them, compared with nvidia-smi.
type inventoryPart struct {
	part
	GPUs []inventoryGPU `json:"gpus"`
	// Compared are the fields compared with nvidia-smi, NotCompared
	// those that could not be, and why.
	Compared    []string `json:"compared"`
	NotCompared []string `json:"notCompared,omitempty"`
	// DisagreementsCaught is how many altered copies of nvidia-smi's
	// answer the comparison told apart from NVML's, of how many: it must
	// catch them all.
	DisagreementsCaught string `json:"disagreementsCaught"`
}

// inventoryGPU is one GPU as the backend lists it.
type inventoryGPU struct {
	Index           int    `json:"index"`
	UUID            string `json:"uuid"`
	Model           string `json:"model"`
	MemoryMiB       int64  `json:"memoryMiB"`
	UsableMemoryMiB int64  `json:"usableMemoryMiB"`
	NUMANode        int    `json:"numaNode"`
	NVLinkPeers     []int  `json:"nvlinkPeers"`
	Healthy         bool   `json:"healthy"`
}

func checkInventory(ctx context.Context, t *testing.T, m *machine, p *inventoryPart) {
	defer p.end()
	if m.fake != nil {
		p.start(t, m.against(), "the node daemon's NVML backend (pkg/gpu/nvml) over a fake NVML (go-nvml's mock), against a stand-in nvidia-smi that prints the same fake GPUs")
	} else {
		p.start(t, m.against(), "the node daemon's NVML backend (pkg/gpu/nvml) against nvidia-smi")
	}
	devs, err := m.backend.Devices()
	if err != nil {
		p.fail("NVML backend: %v", err)
		return
	}
	for _, d := range devs {
		p.GPUs = append(p.GPUs, inventoryGPU{Index: d.Index, UUID: d.UUID, Model: d.Model, MemoryMiB: d.MemoryMiB,
			UsableMemoryMiB: d.UsableMemoryMiB, NUMANode: d.NUMANode, NVLinkPeers: sorted(d.NVLinkPeers), Healthy: d.Healthy})
	}
	if len(devs) == 0 {
		p.fail("NVML lists no GPU")
	}
	if m.smi == "" {
		p.fail("nvidia-smi is not on PATH: nothing to compare NVML with")
		return
	}
	smi, err := readSMI(ctx, m.smi)
	if err != nil {
		p.fail("nvidia-smi: %v", err)
		return
	}
	p.Compared = []string{"count", "index", "uuid", "name", "driver_version", "memory.total (MiB, within 1)",
		"usable = memory.total - memory.reserved (MiB, within 1)", "NUMA node (the kernel's for nvidia-smi's pci.bus_id)"}
	if smi.Topo == nil {
		p.Compared = append(p.Compared, "NVLink peers (nvidia-smi topo -m)")
	} else {
		p.NotCompared = append(p.NotCompared, "NVLink peers: "+smi.Topo.Error())
	}
	for _, g := range smi.GPUs {
		if g.ReservedMiB < 0 {
			p.NotCompared = append(p.NotCompared, fmt.Sprintf("usable memory of GPU %d: nvidia-smi reports no memory.reserved", g.Index))
		}
	}
	for _, d := range compareInventory(m.driver, devs, smi) {
		p.fail("NVML and nvidia-smi disagree: %s", d)
	}
	// The comparison must fail where they disagree: each altered copy
	// of nvidia-smi's answer must be told apart.
	caught, tried := 0, 0
	for what, alt := range alterations(smi) {
		tried++
		if len(compareInventory(m.driver, devs, alt)) > 0 {
			caught++
		} else {
			p.fail("the comparison missed a disagreement: nvidia-smi with %s", what)
		}
	}
	p.DisagreementsCaught = fmt.Sprintf("%d/%d", caught, tried)
}

// compareInventory says where NVML (devs, driver) and nvidia-smi
// disagree; nothing if they agree.
func compareInventory(driver string, devs []gpu.Device, smi smiInventory) []string {
	var diffs []string
	if len(devs) != len(smi.GPUs) {
		diffs = append(diffs, fmt.Sprintf("NVML lists %d GPUs, nvidia-smi %d", len(devs), len(smi.GPUs)))
	}
	within1 := func(a, b int64) bool { return a-b <= 1 && b-a <= 1 }
	for i := range min(len(devs), len(smi.GPUs)) {
		d, g := devs[i], smi.GPUs[i]
		say := func(format string, args ...any) {
			diffs = append(diffs, fmt.Sprintf("GPU %d (%s): ", d.Index, d.UUID)+fmt.Sprintf(format, args...))
		}
		if d.Index != g.Index {
			say("index %d, nvidia-smi %d", d.Index, g.Index)
		}
		if d.UUID != g.UUID {
			say("nvidia-smi lists %s here", g.UUID)
		}
		if d.Model != g.Name {
			say("model %q, nvidia-smi %q", d.Model, g.Name)
		}
		if driver != g.Driver {
			say("driver %q, nvidia-smi %q", driver, g.Driver)
		}
		if !within1(d.MemoryMiB, g.TotalMiB) {
			say("memory %d MiB, nvidia-smi %d MiB", d.MemoryMiB, g.TotalMiB)
		}
		if g.ReservedMiB >= 0 {
			switch want := g.TotalMiB - g.ReservedMiB; {
			case d.UsableMemoryMiB == 0:
				say("usable memory unknown to the backend (it books all %d MiB), nvidia-smi reserves %d MiB: %d MiB usable", d.MemoryMiB, g.ReservedMiB, want)
			case !within1(d.UsableMemoryMiB, want):
				say("usable memory %d MiB, nvidia-smi %d MiB (%d less %d reserved)", d.UsableMemoryMiB, want, g.TotalMiB, g.ReservedMiB)
			}
		}
		if d.NUMANode != g.NUMANode {
			say("NUMA node %d, the kernel's for nvidia-smi's bus %s: %d", d.NUMANode, g.BusID, g.NUMANode)
		}
		if smi.Topo == nil && !slices.Equal(sorted(d.NVLinkPeers), sorted(g.Peers)) {
			say("NVLink peers %v, nvidia-smi topo -m %v", sorted(d.NVLinkPeers), sorted(g.Peers))
		}
	}
	return diffs
}

func sorted(s []int) []int {
	out := slices.Sorted(slices.Values(s))
	if out == nil {
		out = []int{}
	}
	return out
}

// alterations are copies of nvidia-smi's answer, each with one thing
// changed on its first GPU, that the comparison must tell apart from
// NVML's: keyed by what changed.
func alterations(smi smiInventory) map[string]smiInventory {
	alt := map[string]smiInventory{}
	change := func(what string, edit func(g *smiGPU)) {
		c := smi
		c.GPUs = slices.Clone(smi.GPUs)
		edit(&c.GPUs[0])
		alt[what] = c
	}
	if len(smi.GPUs) == 0 {
		return alt
	}
	alt["a GPU fewer"] = smiInventory{GPUs: smi.GPUs[1:], Topo: smi.Topo}
	change("another index", func(g *smiGPU) { g.Index += 7 })
	change("another UUID", func(g *smiGPU) { g.UUID += "0" })
	change("another name", func(g *smiGPU) { g.Name += " (altered)" })
	change("another driver", func(g *smiGPU) { g.Driver += ".1" })
	change("1 GiB more memory", func(g *smiGPU) { g.TotalMiB += 1024 })
	if smi.GPUs[0].ReservedMiB >= 0 {
		change("64 MiB more reserved", func(g *smiGPU) { g.ReservedMiB += 64 })
	}
	change("another NUMA node", func(g *smiGPU) { g.NUMANode++ })
	if smi.Topo == nil {
		change("other NVLink peers", func(g *smiGPU) {
			if len(g.Peers) > 0 {
				g.Peers = nil
			} else {
				g.Peers = []int{g.Index + 1}
			}
		})
	}
	return alt
}
