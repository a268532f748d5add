package deviceplugin

import (
	"context"
	"errors"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// pending is a claim that Allocate named and whose container has not
// started yet.
type pending struct {
	// allocated is when Allocate named it.
	allocated time.Time
	// ready, once set, is the container that holds the claim's devices
	// and its allocation, found in a kubelet answer asked for after
	// allocated; the claim's CDI spec is written. A new Allocate of the
	// same claim replaces the pending claim, and ready with it.
	ready *resolved
	// tried is set once resolving it ahead failed (an init container
	// asks for the resource, a bad record): it is resolved when its
	// container starts, and the prefetch does not try again for it.
	tried bool
}

// resolved is a container and its allocation.
type resolved struct {
	holder
	alloc *gpusharev1.ContainerAllocation
	// hooked is set for devices that defer to their container's hooks
	// (hookedOnly): their CDI device carries hookedEdits.
	hooked bool
	// env is given besides the allocation's own (aliyunEnv).
	env []string
	// mps is set for a container that asks for GPUs under MPS
	// (asksMPS): only it gets the node's MPS client edits.
	mps bool
}

// hookedOnly is the resolution of devices that defer to the hooks of
// their container h (holder.defers): their CDI device carries
// hookedEdits, whichever of the pod's containers they are (they may not
// tell an init container from the app container that reuses its
// devices). The hooks' own claim checks the record and the GPUs.
func hookedOnly(h holder) *resolved {
	return &resolved{holder: h, alloc: &gpusharev1.ContainerAllocation{}, hooked: true}
}

// edits are what the claim's CDI device gives the container: the node's
// MPS client edits (mps, nil without MPS) only if it asks for MPS.
func (r *resolved) edits(mps *MPS) edits {
	if r.hooked {
		return hookedEdits
	}
	if !r.mps {
		mps = nil
	}
	e := gpuEdits(r.alloc, mps)
	e.Env = append(e.Env, r.env...)
	return e
}

// forgetClaimsAfter is how long a claim whose container never starts is
// kept.
const forgetClaimsAfter = 10 * time.Minute

// noteAllocated records that Allocate named claim now.
func (m *Manager) noteAllocated(claim string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.claims[claim] = &pending{allocated: now}
	m.retries = 0
	m.pr.prefetch(m.prefetch, 0)
	for c, p := range m.claims {
		if now.Sub(p.allocated) > forgetClaimsAfter {
			delete(m.claims, c)
		}
	}
}

// allocatedAt returns when Allocate named claim, or otherwise if it did
// not (before the daemon started, or long ago).
func (m *Manager) allocatedAt(claim string, otherwise time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.claims[claim]; p != nil {
		return p.allocated
	}
	return otherwise
}

// forget drops claim: its container was found.
func (m *Manager) forget(claim string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.claims, claim)
}

// takeReady returns the container of claim if it was resolved ahead, and
// drops the claim.
func (m *Manager) takeReady(claim string) *resolved {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.claims[claim]
	if p == nil || p.ready == nil {
		return nil
	}
	delete(m.claims, claim)
	return p.ready
}

// containerOf returns the container that holds ids of resource and its
// allocation, with the CDI spec of claim written: resolved ahead by the
// prefetch, or now. A container resolved ahead is checked again against
// the GPUs' health.
func (m *Manager) containerOf(ctx context.Context, resource, claim string, ids []string) (holder, *gpusharev1.ContainerAllocation, string, error) {
	if r := m.takeReady(claim); r != nil {
		return r.holder, r.alloc, "ahead", m.checkGPUs(r.holder, r.alloc)
	}
	r, err := m.resolve(ctx, resource, claim, ids)
	if err != nil {
		return r.holder, nil, "", err
	}
	// resolve dropped the claim: one there now was named by a newer
	// Allocate, for another container (this one's pod gone), and may be
	// resolved ahead already. Its spec must not be overwritten.
	if err := m.writeSpec(claim, r, nil); err != nil {
		return r.holder, nil, "", errWriting(r.holder, err)
	}
	return r.holder, r.alloc, "now", nil
}

// writeSpec writes the CDI spec of claim for r: it stages the spec, and
// renames it into place under m.mu, where the sweep removes specs, only
// while the claim's pending entry is still want (nil: none). Else a newer
// Allocate named the claim, for another container, and errReplaced says
// so.
func (m *Manager) writeSpec(claim string, r *resolved, want *pending) error {
	tmp, err := stageSpec(m.cfg.CDIDir, claim, r.edits(m.cfg.MPS))
	if err != nil {
		return err
	}
	m.mu.Lock()
	if m.claims[claim] != want {
		err = errReplaced
	} else {
		err = os.Rename(tmp, SpecPath(m.cfg.CDIDir, claim))
	}
	m.mu.Unlock()
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// prepare resolves ahead the containers that answer l shows holding
// devices of claims that Allocate named before l was asked for, and
// writes their CDI specs, so that they start without a call to the
// kubelet or a write. It passes over pods whose init containers ask for
// the resource (which container a claim is depends then on what has
// finished when it starts) and containers whose record does not check
// out: those are resolved when they start, and fail then with the reason.
func (m *Manager) prepare(ctx context.Context, l *listing) {
	if l == nil || !m.waiting(l.started) {
		return
	}
	for i := range l.containers {
		c := &l.containers[i]
		for _, held := range c.held {
			if held.ids.len() == 0 {
				continue
			}
			ids := held.ids.sorted()
			claim := claimOf(held.resource, ids)
			m.mu.Lock()
			p := m.claims[claim]
			todo := p != nil && p.ready == nil && p.allocated.Before(l.started)
			m.mu.Unlock()
			if !todo {
				continue
			}
			h := holder{Namespace: c.namespace, Pod: c.pod, Container: c.name, Hooked: c.hooked()}
			if err := m.prepareOne(ctx, p, claim, h, held.resource); err != nil {
				m.mu.Lock()
				p.tried = true
				m.mu.Unlock()
				m.logger.V(4).Info("Not resolving a container ahead", "pod", klog.KRef(h.Namespace, h.Pod), "container", h.Container,
					"resource", held.resource, "reason", err)
			}
		}
	}
}

// waiting reports whether a claim named before t has no container yet,
// and resolving it ahead was not tried.
func (m *Manager) waiting(t time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waitingLocked(t)
}

// waitingLocked is waiting, with m.mu held.
func (m *Manager) waitingLocked(t time.Time) bool {
	for _, p := range m.claims {
		if p.ready == nil && !p.tried && p.allocated.Before(t) {
			return true
		}
	}
	return false
}

// prepareOne resolves pending claim p to container h ahead of its start
// and writes its spec.
func (m *Manager) prepareOne(ctx context.Context, p *pending, claim string, h holder, resource string) error {
	r, err := m.ahead(ctx, h, resource)
	if err != nil {
		return err
	}
	// Only while p is still the claim's: a spec for a container that has
	// been replaced must not land after the new container's own.
	if err := m.writeSpec(claim, r, p); err != nil {
		return err
	}
	m.mu.Lock()
	p.ready = r
	m.mu.Unlock()
	return nil
}

// ahead resolves the devices of resource that container h holds, ahead
// of its start.
func (m *Manager) ahead(ctx context.Context, h holder, resource string) (*resolved, error) {
	if h.defers(resource) {
		return hookedOnly(h), nil
	}
	pod, err := m.cfg.Pods(ctx, h.Namespace, h.Pod)
	if err != nil {
		return nil, err
	}
	switch {
	case pod.DeletionTimestamp != nil:
		// Perhaps a pod of the same name gone, as the informer has
		// not seen yet, and not the one the kubelet admitted.
		return nil, errDeleting
	case initAsks(pod, resource):
		return nil, errInitContainers
	}
	a, err := m.allocation(pod, h.Container)
	if err != nil {
		return nil, err
	}
	if err := m.checkGPUs(h, a); err != nil {
		return nil, err
	}
	return &resolved{holder: h, alloc: a, env: m.aliyunEnvOf(pod, h.Container, a), mps: m.asksMPS(pod, h.Container)}, nil
}

var (
	errInitContainers = errors.New("an init container of the pod asks for the resource")
	errReplaced       = errors.New("the devices were allocated again since")
	errDeleting       = errors.New("the pod is being deleted")
)

// initAsks reports whether an init container of pod, not a sidecar, asks
// for resource.
func initAsks(pod *corev1.Pod, resource string) bool {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) && containerAsks(c, resource) {
			return true
		}
	}
	return false
}
