package plugin

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/decision"
)

// learnCluster has the policy learn the workload from the pods of this
// profile in the cluster, oldest first: after a restart the scheduler
// weighs the mix it had learned, not its prior.
func (pl *GPUShare) learnCluster(ctx context.Context) {
	if !pl.policy.Learns() {
		return
	}
	all, err := pl.handle.SharedInformerFactory().Core().V1().Pods().Lister().List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing pods to learn the workload from")
		return
	}
	mine := make([]*corev1.Pod, 0, len(all))
	for _, p := range all {
		if p.Spec.SchedulerName == pl.handle.ProfileName() {
			mine = append(mine, p)
		}
	}
	n := decision.Learn(pl.policy, pl.model, mine, func(node string) bool {
		return pl.cache.Read(node, func(*alloc.NodeState) {}) == nil
	})
	klog.FromContext(ctx).V(1).Info("Learned the workload from the cluster's pods", "profile", pl.handle.ProfileName(), "pods", n)
}
