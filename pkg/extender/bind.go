package extender

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/binding"
	"github.com/gpushare/gpushare/pkg/decision"
)

// refusal is a bind that was not done: kube-scheduler reads it from the
// answer's Error (with status 200, as the extender protocol has it).
type refusal struct {
	answer *extenderv1.ExtenderBindingResult
	// result is the metrics label: refused or failed.
	result string
}

func (r *refusal) Error() string { return r.answer.Error }

// errRefused marks the binds refused before anything was booked: the pod
// is not this extender's to bind there.
var errRefused = errors.New("refused")

func (s *Server) bind(ctx context.Context, body []byte) (any, error) {
	var args extenderv1.ExtenderBindingArgs
	if err := decode(body, &args); err != nil {
		return nil, err
	}
	if args.PodName == "" || args.PodNamespace == "" || args.Node == "" {
		return nil, badRequest{errors.New("bind needs podName, podNamespace and node")}
	}
	ref := klog.KRef(args.PodNamespace, args.PodName)
	err := s.bindPod(ctx, &args)
	result := "failed"
	switch {
	case errors.Is(err, errRefused):
		result = "refused"
		s.Logger.Info("Refused bind", "pod", ref, "podUID", args.PodUID, "node", args.Node, "reason", err.Error())
	case err != nil:
		s.Logger.Error(err, "Bind failed", "pod", ref, "node", args.Node)
	default:
		return &extenderv1.ExtenderBindingResult{}, nil
	}
	return nil, &refusal{answer: &extenderv1.ExtenderBindingResult{Error: err.Error()}, result: result}
}

// pod returns the pod to bind: from the informer when it has this one
// (the scheduler saw the pod there too), else from the apiserver.
func (s *Server) pod(ctx context.Context, args *extenderv1.ExtenderBindingArgs) (*corev1.Pod, error) {
	if s.Pods != nil {
		pod, err := s.Pods.Pods(args.PodNamespace).Get(args.PodName)
		if err == nil && (args.PodUID == "" || pod.UID == args.PodUID) {
			return pod, nil
		}
	}
	return s.Client.CoreV1().Pods(args.PodNamespace).Get(ctx, args.PodName, metav1.GetOptions{})
}

// admit refuses what kube-scheduler would never ask: a pod of another
// scheduler, a pod already bound, a node the latest filter of this very
// pod (by UID) did not pass, or no recent filter at all. Without these a
// caller of /bind could place any pod on any node past every filter.
func (s *Server) admit(pod *corev1.Pod, node string) error {
	if !slices.Contains(s.SchedulerNames, pod.Spec.SchedulerName) {
		return fmt.Errorf("%w: pod %s/%s has schedulerName %q, not one of this extender's %q",
			errRefused, pod.Namespace, pod.Name, pod.Spec.SchedulerName, s.SchedulerNames)
	}
	if pod.Spec.NodeName != "" {
		return fmt.Errorf("%w: pod %s/%s is already bound to %s", errRefused, pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	switch passed, known := s.passed.check(pod.UID, node); {
	case !known:
		return fmt.Errorf("%w: no recent filter call for pod %s/%s (UID %s)", errRefused, pod.Namespace, pod.Name, pod.UID)
	case !passed:
		return fmt.Errorf("%w: the latest filter call for pod %s/%s did not pass node %s", errRefused, pod.Namespace, pod.Name, node)
	}
	return nil
}

func (s *Server) bindPod(ctx context.Context, args *extenderv1.ExtenderBindingArgs) (err error) {
	pod, err := s.pod(ctx, args)
	if err != nil {
		return err
	}
	if s.reserved.take(pod.UID) {
		// What filter reserved is placed again below, under the cache's
		// lock, or forgotten if the bind fails.
		defer func() {
			if err != nil {
				s.Cache.Forget(pod.UID)
			}
		}()
	}
	if args.PodUID != "" && pod.UID != args.PodUID {
		return fmt.Errorf("pod %s/%s has UID %s, not %s: it was replaced", args.PodNamespace, args.PodName, pod.UID, args.PodUID)
	}
	if err := s.admit(pod, args.Node); err != nil {
		return err
	}
	req, err := decision.Request(s.Model, pod)
	if err != nil {
		return err
	}
	var p *alloc.Placement
	if req != nil {
		placer, err := decision.Placer(s.Policy, pod)
		if err != nil {
			return err
		}
		if p, err = s.Cache.PlaceAndAssume(pod.UID, placer, args.Node, req); err != nil {
			return err
		}
	}
	if err := binding.Bind(ctx, s.Client, pod, args.Node, p, gpusharev1.AskedOf(pod.Annotations, s.Model.RequestAnnotations())); err != nil {
		// Nothing was recorded: free the GPUs for the next try.
		s.Cache.Forget(pod.UID)
		return err
	}
	s.passed.forget(pod.UID)
	if req != nil {
		// Only bound pods count in the learned workload: pods that
		// cannot run do not steer placement.
		s.Policy.Observe(string(pod.UID), req)
	}
	s.Logger.V(2).Info("Bound pod", "pod", klog.KObj(pod), "node", args.Node)
	return nil
}
