package plugin

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// waiters are the pods turned away for want of room, each with the
// cache's count of releases it was judged by (Cache.Freed). The queueing
// hints requeue a waiting pod when an event may free room, but the
// cache's own informer handler applies the event, and may do so after
// the pod was tried again: a pod judged before the latest release is
// activated once the cache has it.
type waiters struct {
	mu   sync.Mutex
	pods map[types.UID]waiter
}

type waiter struct {
	pod   *corev1.Pod
	freed uint64
}

// add notes that pod was turned away, judged with the cache's count
// freed.
func (w *waiters) add(pod *corev1.Pod, freed uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pods == nil {
		w.pods = map[types.UID]waiter{}
	}
	w.pods[pod.UID] = waiter{pod: pod, freed: freed}
}

// remove forgets a pod that was placed.
func (w *waiters) remove(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pods, uid)
}

// judgedBefore takes out and returns the pods judged with a count below
// freed, by namespace/name: they were judged on less room than there is.
func (w *waiters) judgedBefore(freed uint64) map[string]*corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out map[string]*corev1.Pod
	for uid, p := range w.pods {
		if p.freed < freed {
			if out == nil {
				out = map[string]*corev1.Pod{}
			}
			out[p.pod.Namespace+"/"+p.pod.Name] = p.pod
			delete(w.pods, uid)
		}
	}
	return out
}

// wake activates, each time the cache applies a change that may make
// room, the waiting pods judged before it, until ctx ends. A pod turned
// away while the change was being applied is caught at the next wake or
// by its own check in PostFilter.
func (s *Shared) wake(ctx context.Context, logger klog.Logger, h fwk.Handle) {
	_, freedCh := s.cache.Freed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-freedCh:
			freed, _ := s.cache.Freed()
			if pods := s.waiters.judgedBefore(freed); len(pods) > 0 {
				logger.V(4).Info("Retrying pods turned away before room was freed", "pods", len(pods))
				h.Activate(logger, pods)
			}
		}
	}
}

// turnedAway notes pod among the waiters, judged with the cache's count
// freed; if the cache applied a release since, the wake for it may have
// passed, and the pod is activated at once (kube-scheduler moves a pod
// activated in its own cycle once the cycle ends).
func (pl *GPUShare) turnedAway(ctx context.Context, pod *corev1.Pod, freed uint64) {
	pl.waiters.add(pod, freed)
	if now, _ := pl.cache.Freed(); now > freed {
		if pods := pl.waiters.judgedBefore(now); len(pods) > 0 {
			pl.handle.Activate(klog.FromContext(ctx), pods)
		}
	}
}
