// Package deviceplugin is gpushare's kubelet device plugin (API v1beta1).
// It serves each GPU resource of the resource model as its own plugin and
// hands every container exactly the GPUs the scheduler recorded for its
// pod, without guessing:
//
//  1. Allocate cannot know the pod (the kubelet sends only device IDs), so
//     it answers with a CDI device named after those IDs,
//     gpushare.io/container=<claim>, and nothing else.
//  2. The kubelet calls PreStartContainer with the same IDs just before it
//     creates the container. The plugin asks the kubelet's PodResources
//     API which pod and container hold those IDs (the kubelet's own
//     bookkeeping: exact, whatever the order or number of pods starting),
//     reads that pod's allocation record and writes the CDI spec for the
//     claim: the GPUs' UUIDs, the memory and compute shares, and the MPS
//     limits. Usually the daemon has done so ahead, when it asked the
//     kubelet after the latest Allocate (prefetch), and the call only
//     checks the GPUs' health.
//  3. The container runtime resolves the CDI device when it creates the
//     container, after PreStartContainer returned.
//
// No lock is held across pods: concurrent PreStartContainer calls share
// one PodResources listing and resolve independently. A pod without a
// valid record, or whose record does not name this node's GPUs, fails
// PreStartContainer with the reason, so its container never starts with a
// GPU it was not given.
//
// The devices of a resource are tokens, not GPUs: the kubelet counts them
// for admission; which GPU a container gets comes from its record.
package deviceplugin
