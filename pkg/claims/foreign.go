package claims

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/record"
)

// foreignAllocation translates the placement another scheduler recorded
// on pod (record.ForeignAllocation: Aliyun's gpushare, Elastic GPU
// Scheduler) onto this node's GPUs, so that a container of a pod placed
// before gpushare took over gets its old GPUs when it (re)starts. It is
// then checked as gpushare's own records are.
func (c *Claims) foreignAllocation(pod *corev1.Pod) (*gpusharev1.Allocation, error) {
	sys := record.Foreign(pod)
	if c.cfg.Requests == nil {
		return nil, fmt.Errorf("%w: no request model to read it by", sys)
	}
	req, err := c.cfg.Requests(pod)
	if err != nil {
		return nil, fmt.Errorf("%w: the pod's own request: %w", sys, err)
	}
	a, err := record.ForeignAllocation(pod, req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	gpus := make([]alloc.GPU, 0, len(c.gpus))
	for _, d := range c.gpus {
		gpus = append(gpus, alloc.GPU{Index: d.Index, UUID: d.UUID, Model: d.Model, MemoryMiB: usable(d)})
	}
	c.mu.Unlock()
	a, err = record.OnNode(a, req, gpus)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sys, err)
	}
	return a, nil
}

// usable is the memory processes can allocate on d, as the inventory
// publishes it.
func usable(d gpu.Device) int64 {
	if d.UsableMemoryMiB > 0 && d.UsableMemoryMiB < d.MemoryMiB {
		return d.UsableMemoryMiB
	}
	return d.MemoryMiB
}
