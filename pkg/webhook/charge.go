// Package webhook is gpushare's mutating admission webhook: it writes
// into each pod, as it is created, what the pod charges against its
// namespace's GPU quota (pkg/quota), as two extended resources on its
// first app container, so that a plain ResourceQuota bounds a team's GPU
// memory and compute whatever dialect its pods ask in. The API server's
// own quota admission, after the webhooks, then counts and refuses.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/quota"
	"github.com/gpushare/gpushare/pkg/resource"
)

// Charged are the extended resources a pod's charge is written as.
var Charged = []corev1.ResourceName{quota.MemoryResource, quota.ComputeResource}

// Written returns the charge written on pod's app containers, where the
// webhook writes it, and whether any container, init or app, carries a
// charged resource at all (a pod created past the webhook carries none).
func Written(pod *corev1.Pod) (quota.Charge, bool) {
	var c quota.Charge
	found := false
	for _, ctr := range pod.Spec.InitContainers {
		for _, n := range Charged {
			_, ok := ctr.Resources.Requests[n]
			found = found || ok
		}
	}
	for _, ctr := range pod.Spec.Containers {
		r := ctr.Resources.Requests
		if q, ok := r[quota.MemoryResource]; ok {
			c.MemoryMiB += q.Value() >> 20
			found = true
		}
		if q, ok := r[quota.ComputeResource]; ok {
			c.Compute += q.Value()
			found = true
		}
	}
	return c, found
}

// Claims reads the ResourceClaims and ResourceClaimTemplates pods name.
type Claims interface {
	Claim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
	Template(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimTemplate, error)
}

// Charger writes pods' charges.
type Charger struct {
	// Model translates a pod's resources and annotations, in any dialect,
	// into what it asks.
	Model *resource.Model
	// GPUs returns the cluster's GPUs, which price whole GPUs and
	// percents of a GPU's memory; one of each model, memory and MPS is
	// enough.
	GPUs func() []alloc.GPU
	// Claims reads the claims a pod names.
	Claims Claims
	// Bounded reports whether a ResourceQuota of namespace bounds either
	// charged resource. A pod whose charge cannot be reckoned (a request
	// the model refuses, a claim not yet created) is refused there, and
	// let through unchanged elsewhere: the scheduler says what is wrong
	// with it, and no quota misses it.
	Bounded func(namespace string) bool
	// Metrics, if set, counts the answers to pod creations.
	Metrics *Metrics
}

// Review answers one admission request: pods being created get their
// charge written (and any charge the pod's author wrote is replaced);
// anything else is allowed unchanged.
func (c *Charger) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Operation != admissionv1.Create || req.Resource.Group != "" || req.Resource.Resource != "pods" || req.SubResource != "" {
		return allow
	}
	resp, charge := c.review(ctx, req)
	switch {
	case !resp.Allowed:
		c.Metrics.review("refused")
	case !charge.Zero():
		c.Metrics.review("charged")
	default:
		c.Metrics.review("uncharged")
	}
	return resp
}

// review is Review of a pod's creation; it returns the charge written.
func (c *Charger) review(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, quota.Charge) {
	allow := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(req, fmt.Sprintf("gpushare cannot read the pod: %v", err)), quota.Charge{}
	}
	// A pod being created may have no namespace of its own yet.
	pod.Namespace = req.Namespace
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "*"
	}
	charge, err := c.charge(ctx, &pod)
	// A pod of claims says its charge even when it is zero (listOf),
	// where the charge was reckoned.
	explicit := err == nil && len(pod.Spec.ResourceClaims) > 0
	if err != nil {
		if c.Bounded(req.Namespace) {
			return deny(req, fmt.Sprintf("gpushare cannot charge pod %s to the GPU quota of namespace %s: %v", name, req.Namespace, err)), quota.Charge{}
		}
		charge = quota.Charge{}
	}
	patch, err := patchFor(&pod, charge, explicit)
	if err != nil {
		return deny(req, fmt.Sprintf("gpushare cannot write the GPU quota charge of pod %s: %v", name, err)), quota.Charge{}
	}
	if patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		allow.Patch, allow.PatchType = patch, &pt
	}
	return allow, charge
}

func deny(req *admissionv1.AdmissionRequest, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: req.UID, Result: &metav1.Status{
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: 403, Message: msg}}
}

// charge reckons what pod charges: its containers' requests and its
// ResourceClaims' requests of gpushare's device classes.
func (c *Charger) charge(ctx context.Context, pod *corev1.Pod) (quota.Charge, error) {
	gpus := c.GPUs()
	// The model refuses memory no GPU could hold, as the scheduler does.
	var largest int64
	for i := range gpus {
		largest = max(largest, gpus[i].MemoryMiB)
	}
	c.Model.SetLargestGPU(largest)
	req, err := c.Model.PodRequest(pod)
	if err != nil {
		return quota.Charge{}, err
	}
	var claims []alloc.ContainerRequest
	for _, pc := range pod.Spec.ResourceClaims {
		rc, err := c.claim(ctx, pod.Namespace, pc)
		if err != nil {
			return quota.Charge{}, err
		}
		reqs, err := claim.Requests(rc)
		if err != nil {
			return quota.Charge{}, err
		}
		claims = append(claims, reqs...)
	}
	return quota.Of(req, claims, gpus)
}

// claim returns the claim pc names, or one with the spec of the template
// it names (the claim the pod will get).
func (c *Charger) claim(ctx context.Context, namespace string, pc corev1.PodResourceClaim) (*resourceapi.ResourceClaim, error) {
	switch {
	case pc.ResourceClaimName != nil:
		rc, err := c.Claims.Claim(ctx, namespace, *pc.ResourceClaimName)
		if err != nil {
			return nil, fmt.Errorf("reading ResourceClaim %s (create a pod's claims before the pod): %w", *pc.ResourceClaimName, err)
		}
		return rc, nil
	case pc.ResourceClaimTemplateName != nil:
		t, err := c.Claims.Template(ctx, namespace, *pc.ResourceClaimTemplateName)
		if err != nil {
			return nil, fmt.Errorf("reading ResourceClaimTemplate %s (create a pod's claim templates before the pod): %w", *pc.ResourceClaimTemplateName, err)
		}
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: pc.Name}, Spec: t.Spec.Spec}, nil
	}
	return nil, errors.New("pod resource claim " + pc.Name + " names neither a claim nor a template")
}

// op is one JSON Patch operation.
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patchFor returns the JSON Patch that writes charge onto pod's first
// app container and removes the charged resources from every other; nil
// when the pod already says exactly that.
func patchFor(pod *corev1.Pod, charge quota.Charge, explicit bool) ([]byte, error) {
	var ops []op
	fix := func(path string, c *corev1.Container, want corev1.ResourceList) {
		r := c.Resources.DeepCopy()
		for _, list := range []*corev1.ResourceList{&r.Requests, &r.Limits} {
			for _, n := range Charged {
				delete(*list, n)
			}
			for n, q := range want {
				if *list == nil {
					*list = corev1.ResourceList{}
				}
				(*list)[n] = q
			}
		}
		if !equalCharged(c.Resources.Requests, r.Requests) || !equalCharged(c.Resources.Limits, r.Limits) {
			ops = append(ops, op{Op: "add", Path: path, Value: r})
		}
	}
	for i := range pod.Spec.InitContainers {
		fix(fmt.Sprintf("/spec/initContainers/%d/resources", i), &pod.Spec.InitContainers[i], nil)
	}
	for i := range pod.Spec.Containers {
		var want corev1.ResourceList
		if i == 0 {
			want = listOf(charge, explicit)
		}
		fix(fmt.Sprintf("/spec/containers/%d/resources", i), &pod.Spec.Containers[i], want)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

// listOf returns charge as resources; a zero figure is left out unless
// explicit. A pod that names ResourceClaims carries its charge even when
// it is zero: its claims may be replaced before it is scheduled, and
// gpushare-scheduler refuses a pod that then asks more than it was
// charged, which it can tell only of a pod that says what it was.
func listOf(charge quota.Charge, explicit bool) corev1.ResourceList {
	l := corev1.ResourceList{}
	if charge.MemoryMiB > 0 || explicit {
		l[quota.MemoryResource] = *apiresource.NewQuantity(charge.MemoryMiB<<20, apiresource.BinarySI)
	}
	if charge.Compute > 0 || explicit {
		l[quota.ComputeResource] = *apiresource.NewQuantity(charge.Compute, apiresource.DecimalSI)
	}
	return l
}

// equalCharged reports whether a and b hold the same charged resources.
func equalCharged(a, b corev1.ResourceList) bool {
	for _, n := range Charged {
		qa, inA := a[n]
		qb, inB := b[n]
		if inA != inB || inA && qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}
