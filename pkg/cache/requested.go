package cache

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// countLocked counts a bound pod's CPU and memory against its node, once:
// a bound pod's requests and node do not change.
func (c *Cache) countLocked(pod *corev1.Pod) {
	if _, ok := c.bound[pod.UID]; ok {
		return
	}
	cpu, mem := c.opts.Resources(pod)
	r := podResources{node: pod.Spec.NodeName, cpu: max(cpu, 0), memoryMi: max(mem, 0)}
	c.bound[pod.UID] = r
	c.addRequested(r, 1)
}

func (c *Cache) uncountLocked(uid types.UID) {
	if r, ok := c.bound[uid]; ok {
		delete(c.bound, uid)
		c.addRequested(r, -1)
	}
}

// addRequested adds (sign 1) or takes away (-1) r on its node, in the
// sums and in the node's state.
func (c *Cache) addRequested(r podResources, sign int64) {
	sum := c.requested[r.node]
	sum.cpu += sign * r.cpu
	sum.memoryMi += sign * r.memoryMi
	if sum.cpu == 0 && sum.memoryMi == 0 {
		delete(c.requested, r.node)
	} else {
		c.requested[r.node] = sum
	}
	if e := c.nodes[r.node]; e != nil {
		e.state.CPUMilli += sign * r.cpu
		e.state.MemoryMiB += sign * r.memoryMi
		e.resum()
	}
}
