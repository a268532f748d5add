package holder

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/podresources"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

// holderOf finds the container that holds ids. A PodResources listing
// asked for after Allocate named the claim serves many containers
// starting at once. When the latest does not show the IDs, the few pods
// it does not show are asked about (ask); failing that, a listing is
// taken: the one under way if it began after Allocate, else the next,
// and one begun after this call if that misses them too (the kubelet
// records an allocation when Allocate returns).
func (c *Resolver) holderOf(ctx context.Context, resource, claim string, ids []string) (podresources.Holder, error) {
	called := c.clock.Now()
	since := c.allocatedAt(claim, called)
	found := func(h podresources.Holder, via string) (podresources.Holder, error) {
		c.logger.V(4).Info("Found the container holding devices", "pod", klog.KRef(h.Namespace, h.Pod),
			"resource", resource, "via", via, "took", c.clock.Since(called))
		return h, nil
	}
	if l := c.cfg.Kubelet.Recent(since); l != nil {
		if h, err := l.Find(resource, ids); err == nil {
			return found(h, "listing")
		}
	}
	if h, ok := c.cfg.Kubelet.FromGets(resource, ids, since); ok {
		return found(h, "prefetched pod")
	}
	if h, ok := c.ask(ctx, resource, ids, since); ok {
		return found(h, "pod")
	}
	for {
		l, err := c.cfg.Kubelet.List(ctx, since)
		if err != nil {
			return podresources.Holder{}, fmt.Errorf("asking the kubelet which container holds %d %s devices: %w", len(ids), resource, err)
		}
		h, err := l.Find(resource, ids)
		if err == nil {
			return found(h, "new listing")
		}
		if !errors.Is(err, podresources.ErrNotHeld) || !l.Started().Before(called) {
			return h, err
		}
		since = called
	}
}

// ask looks for the container holding exactly ids among this node's pods
// that ask for resource and that the latest listing does not show holding
// it, when there are at most maxGets: a PodResources Get of each, begun
// after since (a prefetched one, or a new one). Those are the pods
// admitted since the latest listing began, the last of a burst. It
// reports false when they are more, when the kubelet does not serve Get,
// or when none holds exactly ids (an init container's devices that its
// app container reuses): the node is listed then.
func (c *Resolver) ask(ctx context.Context, resource string, ids []string, since time.Time) (podresources.Holder, bool) {
	pods, all, ok := c.unshown(c.cfg.Kubelet.Latest(), nil, resource)
	if !ok || !all {
		return podresources.Holder{}, false
	}
	gets := make([]*podresources.Get, len(pods))
	for i, p := range pods {
		gets[i] = c.cfg.Kubelet.Get(p.Namespace, p.Name, since)
	}
	for i, g := range gets {
		select {
		case <-g.Done():
		case <-ctx.Done():
			return podresources.Holder{}, false
		}
		l, err := g.Result()
		if err != nil {
			c.logger.V(4).Info("Asking the kubelet about a pod", "pod", klog.KObj(pods[i]), "err", err)
			continue
		}
		if h, err := l.Find(resource, ids); err == nil && !h.Init {
			return h, true
		}
	}
	return podresources.Holder{}, false
}

// resolve finds the container holding ids of resource and returns its
// allocation from its pod's record, checked against this node's GPUs.
func (c *Resolver) resolve(ctx context.Context, resource, claim string, ids []string) (*resolved, error) {
	h, err := c.holderOf(ctx, resource, claim, ids)
	if err != nil {
		return &resolved{Holder: h}, fmt.Errorf("%s devices %v: %w", resource, ids[:min(len(ids), 3)], err)
	}
	c.forget(claim)
	if defers(h, resource) {
		return hookedOnly(h), nil
	}
	pod, err := c.cfg.Pods(ctx, h.Namespace, h.Pod)
	if err != nil {
		return &resolved{Holder: h}, fmt.Errorf("reading pod %s/%s: %w", h.Namespace, h.Pod, err)
	}
	h.Container = whichContainer(pod, h, resource, len(ids))
	if h.Container == "" {
		return &resolved{Holder: h}, fmt.Errorf("pod %s/%s: no container asks %d %s devices", h.Namespace, h.Pod, len(ids), resource)
	}
	a, err := c.allocation(pod, h.Container)
	if err != nil {
		return &resolved{Holder: h}, err
	}
	if err := c.checkGPUs(h, a); err != nil {
		return &resolved{Holder: h, alloc: a}, err
	}
	r := &resolved{Holder: h, alloc: a, pod: pod, env: c.aliyunEnvOf(pod, h.Container, a)}
	r.mps, r.hamiCore = c.enforcedBy(pod, h.Container, a)
	return r, nil
}

// allocation returns container's allocation from pod's record, read by
// the rules every component follows (record.Reader), which must be for
// this node and what the pod asks: a record written by hand, or one of
// a pod edited after binding or read otherwise under a changed resource
// model, keeps booking its GPUs in the scheduler but gives a container
// nothing here.
func (c *Resolver) allocation(pod *corev1.Pod, container string) (*gpusharev1.ContainerAllocation, error) {
	r := record.Reader{Requests: c.cfg.Requests}
	if c.cfg.RequestAnnotations != nil {
		r.RequestAnnotations = func(*corev1.Pod) []string { return c.cfg.RequestAnnotations }
	}
	b, err := r.Read(pod)
	if errors.Is(err, record.ErrNoRecord) {
		return nil, fmt.Errorf("pod %s/%s has no %s annotation: it was not scheduled by gpushare", pod.Namespace, pod.Name, gpusharev1.AllocationAnnotation)
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if a := b.Allocation; a.Node != c.cfg.Node || pod.Spec.NodeName != c.cfg.Node {
		return nil, fmt.Errorf("pod %s/%s: its GPUs were allocated on node %s, it is bound to %q, this is %s", pod.Namespace, pod.Name, a.Node, pod.Spec.NodeName, c.cfg.Node)
	}
	// On the node's GPUs as the scheduler saw them: another system's
	// record names GPUs by index, and the check covers their models and
	// sizes. A GPU the node does not have is checkGPUs' to report.
	if placed, err := b.On(c.node(), nil); err == nil {
		b = placed
	} else if b.System != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if err := b.Problem(); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	for i := range b.Allocation.Containers {
		if b.Allocation.Containers[i].Name == container {
			return &b.Allocation.Containers[i], nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s: the allocation record has no container %s", pod.Namespace, pod.Name, container)
}

// checkGPUs checks that this node has the GPUs of a, healthy.
func (c *Resolver) checkGPUs(h podresources.Holder, a *gpusharev1.ContainerAllocation) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range a.GPUs {
		d, ok := c.gpus[g.UUID]
		switch {
		case !ok || d.Index != g.Index:
			return fmt.Errorf("pod %s/%s container %s: GPU %d (%s): %w", h.Namespace, h.Pod, h.Container, g.Index, g.UUID, ErrNoGPU)
		case !d.Healthy:
			return fmt.Errorf("pod %s/%s container %s: GPU %d (%s) is unhealthy", h.Namespace, h.Pod, h.Container, g.Index, g.UUID)
		}
	}
	return nil
}

// whichContainer names the container of pod that the kubelet asked about.
// The listing names app and sidecar containers only, and app containers
// reuse the devices of init containers: devices held within a listed
// container's (h.Init), or exactly those of an app container while an
// init container asking as many has not finished, are that init
// container's.
func whichContainer(pod *corev1.Pod, h podresources.Holder, res string, count int) string {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if resource.IsSidecar(c) {
			continue // sidecars are listed under their own name
		}
		if q, ok := c.Resources.Limits[corev1.ResourceName(res)]; !ok || q.Value() != int64(count) {
			continue
		}
		// Hooks are numbered apart (deploy/gpu-hook-policy.yaml): the
		// count alone says, where the pod's status may lag.
		if !finished(pod, c.Name) || res == gpusharev1.HookResource {
			return c.Name
		}
	}
	if h.Init {
		return ""
	}
	return h.Container
}

// finished reports whether the pod's status says init container name
// exited successfully.
func finished(pod *corev1.Pod, name string) bool {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == name && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
			return true
		}
	}
	return false
}

// defers reports whether the devices of resource that h holds give it no
// GPUs of their own: the kubelet gave h hooks (not only a spec that asks
// for them: it gives none while the hook resource is not registered), and
// resource is another. Hooks tell an init container from the app
// container that reuses its devices by their number
// (deploy/gpu-hook-policy.yaml), where other resources may ask the same
// amount for both.
func defers(h podresources.Holder, resource string) bool {
	return h.Hooked && resource != gpusharev1.HookResource
}

var (
	errInitContainers = errors.New("an init container of the pod asks for the resource")
	errReplaced       = errors.New("the devices were allocated again since")
	errDeleting       = errors.New("the pod is being deleted")
	// ErrNoGPU says the record names a GPU this node does not have.
	ErrNoGPU = errors.New("the allocation record names a GPU this node does not have")
)
