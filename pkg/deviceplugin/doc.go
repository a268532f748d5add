// Package deviceplugin is gpushare's kubelet device plugin (API v1beta1):
// the gRPC servers, one per GPU resource of the resource model, and their
// registration with the kubelet, again whenever the kubelet restarts.
//
// The devices of a resource are tokens, not GPUs: the kubelet counts them
// for admission; which GPU a container gets comes from its pod's record.
// The plugins know only device IDs, so they hand the rest to a Resolver
// (holder.Resolver):
//
//  1. Allocate cannot know the pod (the kubelet sends only device IDs), so
//     it answers with a CDI device named after those IDs,
//     gpushare.io/container=<claim> (cdi.ClaimOf), tells the Resolver
//     (Allocated), and nothing else.
//  2. The kubelet calls PreStartContainer with the same IDs just before it
//     creates the container. The Resolver finds the pod and container that
//     hold them (the kubelet's PodResources API), checks that pod's
//     allocation record and writes the claim's CDI spec; usually it has
//     done so ahead, right after Allocate. A pod without a valid record,
//     or whose record does not name this node's GPUs, fails
//     PreStartContainer with the reason, so its container never starts
//     with a GPU it was not given.
//  3. The container runtime resolves the CDI device when it creates the
//     container, after PreStartContainer returned.
//
// The node daemon passes GPU health changes on (Manager.SetGPUs): the
// plugins send the kubelet their devices again, unhealthy with their GPU.
package deviceplugin
