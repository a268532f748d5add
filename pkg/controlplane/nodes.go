package controlplane

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// NodeSpec describes a simulated GPU node.
type NodeSpec struct {
	Name string
	// Model and MemoryMiB of each of Count GPUs.
	Model     string
	MemoryMiB int64
	Count     int
	// WholeCard makes the node hand out whole GPUs only.
	WholeCard bool
	// MPS marks the node's GPUs as running MPS (gpushare-node --mps):
	// only they take keti.com/mpsgpu pods.
	MPS bool
	// CPU cores and memory in GiB; 0 means 64 and 512.
	CPU, MemoryGiB int64
	// Bare leaves out the GPU inventory and the gpushare label: a node
	// daemon (gpushare-node with simulated GPUs) publishes them.
	Bare bool
	// Extended resources the node advertises besides CPU, memory and
	// pods, e.g. a plain extended resource for stock kube-scheduler.
	Extended map[corev1.ResourceName]int64
}

// Inventory returns the GPU inventory the node daemon would publish: GPUs
// in pairs joined by NVLink, the first half on NUMA node 0.
func (s NodeSpec) Inventory() *gpusharev1.GPUInventory {
	inv := &gpusharev1.GPUInventory{Mode: gpusharev1.ModeShared}
	if s.WholeCard {
		inv.Mode = gpusharev1.ModeWholeCard
	}
	for i := range s.Count {
		g := gpusharev1.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", s.Name, i), Model: s.Model,
			MemoryMiB: s.MemoryMiB, Healthy: true, NUMANode: 2 * i / max(s.Count, 1), MPS: s.MPS}
		if peer := i ^ 1; peer < s.Count {
			g.NVLinkPeers = []int{peer}
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv
}

// KwokAnnotation marks, valued "fake", the nodes kwok manages: it
// pretends to run their pods. A real node (StartRealNode) lacks it.
const KwokAnnotation = "kwok.x-k8s.io/node"

// NotStartedLabel keeps kwok from starting a pod that carries it: the
// pod stays Pending, no container started, as on a node that refuses to
// prepare its claims.
const NotStartedLabel = "test.gpushare.io/not-started"

// Node returns the Node object: labelled gpushare=true and type=kwok,
// carrying its inventory.
func (s NodeSpec) Node() (*corev1.Node, error) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        s.Name,
		Labels:      map[string]string{"type": "kwok", corev1.LabelHostname: s.Name},
		Annotations: map[string]string{KwokAnnotation: "fake"},
	}}
	if s.Bare {
		return n, nil
	}
	value, err := gpusharev1.Marshal(s.Inventory())
	if err != nil {
		return nil, err
	}
	n.Labels[gpusharev1.NodeLabel] = "true"
	n.Annotations[gpusharev1.InventoryAnnotation] = value
	return n, nil
}

// SimulatedGPUs returns the gpushare-node --simulated-gpus file for the
// node's GPUs, laid out as Inventory lays them out.
func (s NodeSpec) SimulatedGPUs() string {
	return fmt.Sprintf("gpus:\n- {model: %q, memoryMiB: %d, count: %d, numaNodes: 2, nvlink: pairs}\n", s.Model, s.MemoryMiB, s.Count)
}

// CreateNode creates the node and sets its capacity, as a kubelet would.
func CreateNode(ctx context.Context, client kubernetes.Interface, s NodeSpec) error {
	n, err := s.Node()
	if err != nil {
		return err
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", s.Name, err)
	}
	cpu, mem := s.CPU, s.MemoryGiB
	if cpu == 0 {
		cpu, mem = 64, 512
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *k8sresource.NewQuantity(cpu, k8sresource.DecimalSI),
		corev1.ResourceMemory: *k8sresource.NewQuantity(mem<<30, k8sresource.BinarySI),
		corev1.ResourcePods:   *k8sresource.NewQuantity(250, k8sresource.DecimalSI),
	}
	for name, v := range s.Extended {
		res[name] = *k8sresource.NewQuantity(v, k8sresource.DecimalSI)
	}
	// kwok updates the node's status too: retry on conflicts.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.CoreV1().Nodes().Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Capacity, cur.Status.Allocatable = res, res
		if len(cur.Status.Conditions) == 0 {
			cur.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("setting node %s capacity: %w", s.Name, err)
	}
	return nil
}

// MarkSchedulable removes the not-ready taint the apiserver puts on new
// nodes, as the node lifecycle controller does once a node is Ready: for
// clusters without kwok and without that controller (benchmarks).
func MarkSchedulable(ctx context.Context, client kubernetes.Interface, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := n.Spec.Taints[:0]
		for _, t := range n.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				taints = append(taints, t)
			}
		}
		n.Spec.Taints = taints
		_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
