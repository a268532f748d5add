// Package inventory publishes a node's GPUs where the scheduler reads
// them: the versioned GPUInventory annotation on the node's own Node
// object, written with a merge patch that touches nothing else, and kept
// there against other writers.
package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// From returns the inventory of devices in mode; mps marks every GPU as
// running an MPS server (the node daemon's --mps).
func From(devices []gpu.Device, mode gpusharev1.Mode, mps bool) *gpusharev1.GPUInventory {
	inv := &gpusharev1.GPUInventory{Mode: mode}
	for _, d := range devices {
		inv.GPUs = append(inv.GPUs, gpusharev1.GPU{Index: d.Index, UUID: d.UUID, Model: d.Model, MemoryMiB: d.MemoryMiB,
			Healthy: d.Healthy, NUMANode: d.NUMANode, NVLinkPeers: append([]int(nil), d.NVLinkPeers...), MPS: mps})
		if u := d.UsableMemoryMiB; u > 0 && u < d.MemoryMiB {
			inv.GPUs[len(inv.GPUs)-1].UsableMemoryMiB = u
		}
	}
	return inv
}

// Reserve returns devices with the allowance reservedMiB gives each model
// (GPUShareArgs.ReservedMiB) taken off the usable memory of the GPUs for
// which the driver reports no reservation: usable memory unknown, or the
// whole memory. A reservation the driver reports is kept, and an
// allowance of the whole memory or more is ignored. devices is not
// changed.
func Reserve(devices []gpu.Device, reservedMiB func(model string) int64) []gpu.Device {
	out := slices.Clone(devices)
	for i := range out {
		d := &out[i]
		if d.UsableMemoryMiB > 0 && d.UsableMemoryMiB < d.MemoryMiB {
			continue
		}
		if r := reservedMiB(d.Model); r > 0 && r < d.MemoryMiB {
			d.UsableMemoryMiB = d.MemoryMiB - r
		}
	}
	return out
}

// NodePatcher applies a JSON merge patch to a node and returns the node
// as the patch left it.
type NodePatcher interface {
	PatchNode(ctx context.Context, name string, patch []byte) (*corev1.Node, error)
}

// UsageFrom summarises live use for the scheduler.
func UsageFrom(use []gpu.Usage, devices []gpu.Device, at time.Time) *gpusharev1.GPUUsage {
	index := make(map[string]int, len(devices))
	for _, d := range devices {
		index[d.UUID] = d.Index
	}
	u := &gpusharev1.GPUUsage{Time: metav1.NewTime(at)}
	for _, x := range use {
		if i, ok := index[x.UUID]; ok {
			u.GPUs = append(u.GPUs, gpusharev1.GPULoad{Index: i, UsedMemoryMiB: x.UsedMemoryMiB,
				UtilizationPercent: int64(min(max(x.UtilizationPercent, 0), 100))})
		}
	}
	return u
}

// PublishUsage writes the node's live GPU use on its Node, the path of a
// daemon without a lease (--lease-duration=0) and of daemons before the
// use moved to the lease (pkg/lease Renewer.PublishUsage). The daemon
// calls it once per interval; a sample is written only when it differs
// from the last one written by DefaultUsageThreshold, or when that one is
// UsageRefresh old, so that a node whose use holds steady does not
// rewrite its Node, and every watcher of Nodes is not sent the node,
// each interval. The scheduler ignores a sample older than a few
// minutes.
func (p *Publisher) PublishUsage(ctx context.Context, u *gpusharev1.GPUUsage) error {
	p.usageMu.Lock()
	defer p.usageMu.Unlock()
	if p.lastUsage != nil && !DefaultUsageThreshold.Matters(p.lastUsage, u) &&
		u.Time.Sub(p.lastUsage.Time.Time) < UsageRefresh {
		return nil
	}
	value, err := gpusharev1.Marshal(u)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{gpusharev1.UsageAnnotation: value},
	}})
	if err != nil {
		return err
	}
	if _, err := p.client.PatchNode(ctx, p.node, patch); err != nil {
		return fmt.Errorf("publishing the GPU usage of node %s: %w", p.node, err)
	}
	p.lastUsage = u
	return nil
}
