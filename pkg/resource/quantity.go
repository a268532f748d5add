package resource

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
)

// extended returns the amount of an extended resource: the limit, else the
// request. Kubernetes does not overcommit extended resources, so a limit
// and a request that differ are an error (reason non-empty).
func extended(r *corev1.ResourceRequirements, name corev1.ResourceName) (q k8sresource.Quantity, ok bool, reason string) {
	limit, hasLimit := r.Limits[name]
	req, hasReq := r.Requests[name]
	switch {
	case hasLimit && hasReq && limit.Cmp(req) != 0:
		return q, false, fmt.Sprintf("limits (%s) and requests (%s) differ; extended resources cannot be overcommitted: set only limits, or both to the same value",
			limit.String(), req.String())
	case hasLimit:
		return limit, true, ""
	case hasReq:
		return req, true, ""
	}
	return q, false, ""
}

// positiveInt returns q as a positive whole number, or why it is not one.
func positiveInt(q k8sresource.Quantity) (int64, string) {
	if q.Sign() <= 0 {
		return 0, fmt.Sprintf("%s is not positive; ask 1 or more, or leave the resource out", q.String())
	}
	v, ok := q.AsInt64()
	if !ok {
		if whole := q.DeepCopy(); !whole.RoundUp(0) {
			return 0, fmt.Sprintf("%s is not a whole number; extended resources count whole units", q.String())
		}
		return 0, fmt.Sprintf("%s is too large", q.String())
	}
	return v, ""
}
