// Package inventory publishes a node's GPUs where the scheduler reads
// them: the versioned GPUInventory annotation on the node's own Node
// object, written with a merge patch that touches nothing else.
package inventory

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// From returns the inventory of devices in mode.
func From(devices []gpu.Device, mode gpusharev1.Mode) *gpusharev1.GPUInventory {
	inv := &gpusharev1.GPUInventory{Mode: mode}
	for _, d := range devices {
		inv.GPUs = append(inv.GPUs, gpusharev1.GPU{Index: d.Index, UUID: d.UUID, Model: d.Model, MemoryMiB: d.MemoryMiB,
			Healthy: d.Healthy, NUMANode: d.NUMANode, NVLinkPeers: append([]int(nil), d.NVLinkPeers...)})
	}
	return inv
}

// Publisher writes a node's inventory when it changes.
type Publisher struct {
	Client kubernetes.Interface
	Node   string
	last   string
}

// Publish validates inv and writes it, with the opt-in label, unless it
// is what was last written. The patch names only the node's own label and
// annotation.
func (p *Publisher) Publish(ctx context.Context, inv *gpusharev1.GPUInventory) error {
	value, err := gpusharev1.Marshal(inv)
	if err != nil {
		return err
	}
	if errs := gpusharev1.ValidateInventory(inv); len(errs) > 0 {
		return fmt.Errorf("GPU inventory of node %s: %w", p.Node, errs.ToAggregate())
	}
	if value == p.last {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{gpusharev1.NodeLabel: "true"},
		"annotations": map[string]string{gpusharev1.InventoryAnnotation: value},
	}})
	if err != nil {
		return err
	}
	if _, err := p.Client.CoreV1().Nodes().Patch(ctx, p.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("publishing the GPU inventory of node %s: %w", p.Node, err)
	}
	p.last = value
	return nil
}
