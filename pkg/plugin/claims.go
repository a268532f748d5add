package plugin

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/claim"
)

// claimRequest returns what pod asks of gpushare's DRA devices through
// its ResourceClaims that are not allocated yet, with base's CPU and
// memory, or nil when it asks nothing of them. DynamicResources allocates
// the claims; the plugin only chooses the node by gpushare's policy and
// books the share until the allocation is seen (Cache.SetClaim). A claim
// not created yet, or one the plugin cannot read, is left to
// DynamicResources, which waits for it and says why.
func (pl *GPUShare) claimRequest(pod *corev1.Pod, base *alloc.PodRequest) (*alloc.PodRequest, error) {
	if len(pod.Spec.ResourceClaims) == 0 || pl.claims == nil {
		return nil, nil
	}
	var containers []alloc.PodContainer
	for _, rc := range claim.Of(pod, pl.claims) {
		if rc.Status.Allocation != nil {
			continue
		}
		crs, err := claim.Requests(rc)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		for _, cr := range crs {
			containers = append(containers, alloc.PodContainer{ContainerRequest: cr, Kind: alloc.App})
		}
	}
	if len(containers) == 0 {
		return nil, nil
	}
	req := &alloc.PodRequest{Key: pod.Namespace + "/" + pod.Name, Containers: containers}
	if base != nil {
		req.Key, req.CPUMilli, req.MemoryMiB = base.Key, base.CPUMilli, base.MemoryMiB
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// allocated returns where DynamicResources' Reserve, which runs before
// GPUShare's, allocated pod's claims of gpushare's devices in this cycle
// (its pending allocations), as a placement on node with base's CPU and
// memory; nil when it allocated none here. The allocator picks a GPU
// from the node's slice, which may not yet count the pods bound a moment
// ago: the plugin books what it picked, not the GPU its own policy
// would have, so that nothing lands on it meanwhile, and an allocation
// that over-commits a GPU is refused before the pod binds.
func (pl *GPUShare) allocated(pod *corev1.Pod, node string, base *alloc.Placement) (*alloc.Placement, error) {
	if pl.claims == nil || pl.handle == nil || pl.handle.SharedDRAManager() == nil {
		return nil, nil
	}
	tracker := pl.handle.SharedDRAManager().ResourceClaims()
	sum := map[int]claim.GPU{}
	for _, rc := range claim.Of(pod, pl.claims) {
		if rc.Status.Allocation != nil {
			continue
		}
		pending := tracker.GetPendingAllocation(rc.UID)
		if pending == nil {
			continue
		}
		c := rc.DeepCopy()
		c.Status.Allocation = pending
		on, gpus, err := claim.Held(c)
		if err != nil {
			return nil, err
		}
		if on == "" {
			continue
		}
		if on != node {
			return nil, fmt.Errorf("claim %s was allocated devices of node %s, the pod goes to %s", rc.Name, on, node)
		}
		for _, g := range gpus {
			s := sum[g.Index]
			s.Index, s.MemoryMiB, s.Compute, s.Whole = g.Index, s.MemoryMiB+g.MemoryMiB, s.Compute+g.Compute, s.Whole || g.Whole
			sum[g.Index] = s
		}
	}
	if len(sum) == 0 {
		return nil, nil
	}
	var n *alloc.Node
	if err := pl.cache.Read(node, func(s *alloc.NodeState) { n = s.Node }); err != nil {
		return nil, err
	}
	p, err := claim.Placement("pod "+pod.Namespace+"/"+pod.Name, slices.Collect(maps.Values(sum)), n)
	if err != nil {
		return nil, err
	}
	p.CPUMilli, p.MemoryMiB = base.CPUMilli, base.MemoryMiB
	return p, nil
}

// claimReleased requeues a pod when a ResourceClaim that held gpushare's
// devices is deallocated or deleted: its share is free.
func (pl *GPUShare) claimReleased(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	o, ok := unwrap(oldObj).(*resourceapi.ResourceClaim)
	if !ok {
		return fwk.QueueSkip, nil
	}
	if node, _, err := claim.Held(o); err != nil || node == "" {
		return fwk.QueueSkip, nil
	}
	if n, ok := newObj.(*resourceapi.ResourceClaim); ok {
		if node, _, err := claim.Held(n); err == nil && node != "" {
			return fwk.QueueSkip, nil
		}
		pl.cache.SetClaim(n)
	} else {
		pl.cache.RemoveClaim(o.UID)
	}
	return pl.retryable(pod), nil
}
