package plugin

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/quota"
	"github.com/gpushare/gpushare/pkg/webhook"
)

// chargeShort returns why pod may not be placed for the GPU quota charge
// it carries (gpushare-webhook's, written when it was created), or "":
// what it asks now, req (nil for none) and its ResourceClaims as they
// are, is more than that charge. A pod's own requests cannot change once
// it is created; the claims it names can be deleted and created again
// larger while it waits. A pod that carries no charge is not checked:
// no quota counted it.
func (pl *GPUShare) chargeShort(pod *corev1.Pod, req *alloc.PodRequest) string {
	written, ok := webhook.Written(pod)
	if !ok {
		return ""
	}
	var claims []alloc.ContainerRequest
	for _, rc := range claim.Of(pod, pl.claims) {
		crs, err := claim.Requests(rc)
		if err != nil {
			return fmt.Sprintf("gpushare: ResourceClaim %s cannot be charged to the namespace's GPU quota (%v), and the pod was charged %s when it was created: "+
				"create the pod again with claims gpushare can charge", rc.Name, err, written)
		}
		claims = append(claims, crs...)
	}
	if req == nil {
		req = &alloc.PodRequest{}
	}
	asks, err := quota.Of(req, claims, pl.cache.Kinds())
	if err != nil {
		// Nothing could hold it: the placement says why.
		return ""
	}
	if asks.MemoryMiB <= written.MemoryMiB && asks.Compute <= written.Compute {
		return ""
	}
	return fmt.Sprintf("gpushare: the pod was charged %s to its namespace's GPU quota when it was created, but asks %s now "+
		"(a ResourceClaim it names was created again larger, or a larger GPU it may take joined the cluster): "+
		"create the pod again to be charged what it asks", written, asks)
}
