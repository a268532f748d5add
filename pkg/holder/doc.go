// Package holder finds the container that holds the devices a kubelet
// device plugin allocated, and what the node daemon knows of the
// containers starting on the node: the claims Allocate named (each a
// container's device IDs of one resource, unknown pod; not
// ResourceClaims, which are pkg/claim's), the prefetch that asks the
// kubelet's PodResources API about them right after Allocate, and the
// resolution of a claim to its container and that container's share of
// the pod's allocation record, checked against this node's GPUs, with
// the claim's CDI spec written.
//
// The device plugin calls Allocated from Allocate and Resolve from
// PreStartContainer; usually the prefetch has resolved the claim ahead,
// and Resolve only checks the GPUs' health again. Time comes from an
// injected clock, so that the prefetch's timing is tested without
// sleeping.
package holder
