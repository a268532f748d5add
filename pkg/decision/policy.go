package decision

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/resource"
	"github.com/gpushare/gpushare/pkg/workload"
)

// Policy builds the placement policy args name, with the workload it
// weighs: learned from the pods the caller observes, from args.Workload's
// shapes (translated with model) as the prior, or those shapes alone when
// learning is off.
func Policy(args *v1alpha1.GPUShareArgs, model *resource.Model) (*workload.Policy, error) {
	cfg := alloc.Config{Node: args.NodePolicy, GPU: args.GPUPolicy, NoTopology: args.DisableTopology,
		Options: alloc.Options{Seed: args.Seed}}
	var lc workload.Config
	if w := args.Workload; w != nil {
		lc.HalfLife, lc.Warmup, lc.Spare, lc.KeepFor = w.HalfLife, w.Warmup, w.KeepIdleGPUs, w.KeepIdleFor.Duration
		p := field.NewPath("workload", "shapes")
		for i, ws := range w.Shapes {
			q, err := shapeOf(model, ws)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.Index(i), err)
			}
			lc.Prior = append(lc.Prior, q)
		}
		if !w.Learns() {
			cfg.Workload = lc.Prior
		}
	}
	policy, err := workload.NewPolicy(cfg, lc)
	if err == nil && lc.Spare && !policy.KeepsIdle() {
		p := field.NewPath("workload", "keepIdleGPUs")
		if policy.Weighs() {
			err = fmt.Errorf("%s: needs a learned workload; workload.learn is false", p)
		} else {
			err = fmt.Errorf("%s: needs a fragmentation-aware nodePolicy (fgd, fgd-pack, fgd-fill, fgd-robust), not %q", p, args.NodePolicy)
		}
	}
	if err != nil {
		return nil, err
	}
	return policy, nil
}

// shapeOf translates a configured shape as the pod it describes would be.
func shapeOf(model *resource.Model, ws v1alpha1.WorkloadShape) (alloc.Shape, error) {
	limits := corev1.ResourceList{}
	for name, q := range ws.Requests {
		if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
			limits[name] = q
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "workload", Name: "shape"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
			Resources: corev1.ResourceRequirements{Requests: ws.Requests, Limits: limits}}}}}
	if len(ws.Models) > 0 {
		pod.Annotations = map[string]string{model.ModelsAnnotation(): strings.Join(ws.Models, "|")}
	}
	req, err := model.PodRequest(pod)
	if err != nil {
		return alloc.Shape{}, err
	}
	q, ok := workload.ShapeOf(req)
	if !ok {
		return alloc.Shape{}, fmt.Errorf("requests %v ask for no GPU of the resource model (%v)", ws.Requests, model.Names())
	}
	q.Weight = ws.Weight
	return q, nil
}

// Learn has policy observe the pods that are bound and have not ended,
// oldest first (by creation, then UID): how a restarted scheduler learns
// again the workload it had learned. Pending pods do not count, as they do
// not when the scheduler runs: a pod counts once it is placed. A pod
// without GPUs counts by its CPU (workload.Learner.ObserveCPU) when
// gpuNode says its node has gpushare GPUs, as the plugin counts it at
// PostBind; with gpuNode nil none does (the extender never sees them). It
// returns how many GPU pods counted.
func Learn(policy *workload.Policy, model *resource.Model, pods []*corev1.Pod, gpuNode func(name string) bool) int {
	if !policy.Learns() {
		return 0
	}
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.UID, b.UID))
	})
	n := 0
	for _, pod := range pods {
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		req, err := model.PodRequest(pod)
		switch {
		case err != nil:
		case req.GPUs():
			policy.Observe(string(pod.UID), req)
			n++
		case gpuNode != nil && gpuNode(pod.Spec.NodeName):
			policy.Observe(string(pod.UID), req)
		}
	}
	return n
}
