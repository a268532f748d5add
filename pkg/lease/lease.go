package lease

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/inventory"
)

// Client reads and writes leases.
type Client interface {
	Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// Renewer renews node's lease every Duration/4, as the kubelet renews
// its node lease, so that a missed renewal or two does not let it lapse.
//
// The lease also carries the node's live GPU use (PublishUsage): each
// renewal writes the latest sample in the lease's gpusharev1.UsageAnnotation,
// at no cost beyond the renewal, and a sample that differs from the one
// on the lease by Threshold or more is written at once. Live use thus
// never writes the Node, whose every change is sent to every watcher of
// Nodes in the cluster.
type Renewer struct {
	Client   Client
	Node     string
	Duration time.Duration
	// Threshold is how far live use must move to be written before the
	// next renewal; inventory.DefaultUsageThreshold if nil.
	Threshold *inventory.UsageThreshold
	// Now is the clock; time.Now if nil.
	Now func() time.Time

	// mu guards usage, the latest sample, written, the sample on the
	// lease after the last write, and wake, which Run waits on.
	mu      sync.Mutex
	usage   *gpusharev1.GPUUsage
	written *gpusharev1.GPUUsage
	wake    chan struct{}
	// renewing serialises Renew and guards lease, the lease as the last
	// write left it: the next renewal updates it without reading it
	// again, and reads it only when the update conflicts.
	renewing sync.Mutex
	lease    *coordinationv1.Lease
}

// Name is the lease of node's daemon.
func Name(node string) string { return gpusharev1.LeasePrefix + node }

// Run renews the lease until ctx ends, and at once when PublishUsage is
// given a sample that matters. Failures are logged and retried at the
// next interval: a daemon that cannot renew is, to the scheduler, a
// daemon that stopped.
func (r *Renewer) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(r.Duration / 4)
	defer t.Stop()
	wake := r.wakeChan()
	for {
		if err := r.Renew(ctx); err != nil {
			logger.Error(err, "Renewing the node daemon's lease failed; the scheduler sends no GPU pod here once it expires",
				"lease", klog.KRef(gpusharev1.LeaseNamespace, Name(r.Node)), "duration", r.Duration)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
	}
}

// PublishUsage makes u the live use the lease carries from the next
// renewal on, and has Run renew at once when u differs from the sample
// on the lease by Threshold or more (or there is none). It does not
// block, and writes nothing itself.
func (r *Renewer) PublishUsage(_ context.Context, u *gpusharev1.GPUUsage) error {
	threshold := inventory.DefaultUsageThreshold
	if r.Threshold != nil {
		threshold = *r.Threshold
	}
	r.mu.Lock()
	r.usage = u
	matters := threshold.Matters(r.written, u)
	r.mu.Unlock()
	if matters {
		select {
		case r.wakeChan() <- struct{}{}:
		default:
		}
	}
	return nil
}

func (r *Renewer) wakeChan() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wake == nil {
		r.wake = make(chan struct{}, 1)
	}
	return r.wake
}

// Renew sets the lease's renew time to now, with the latest live use,
// creating the lease if it is missing. It updates the lease as its last
// write left it, and reads it first only when it has none or the update
// conflicts (someone else wrote it, or it was deleted).
func (r *Renewer) Renew(ctx context.Context) error {
	r.renewing.Lock()
	defer r.renewing.Unlock()
	r.mu.Lock()
	u := r.usage
	r.mu.Unlock()
	var usage string
	if u != nil {
		var err error
		if usage, err = gpusharev1.Marshal(u); err != nil {
			return err
		}
	}
	if r.lease != nil {
		out, err := r.Client.Update(ctx, r.renewed(r.lease.DeepCopy(), usage))
		if err == nil {
			r.wrote(out, u)
			return nil
		}
		r.lease = nil
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return wrap(err, "renewing")
		}
	}
	l, err := r.Client.Get(ctx, gpusharev1.LeaseNamespace, Name(r.Node))
	if apierrors.IsNotFound(err) {
		now := metav1.NewMicroTime(r.now())
		l = r.renewed(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: Name(r.Node), Namespace: gpusharev1.LeaseNamespace},
			Spec:       coordinationv1.LeaseSpec{AcquireTime: &now},
		}, usage)
		out, err := r.Client.Create(ctx, l)
		if err != nil {
			return wrap(err, "creating")
		}
		r.wrote(out, u)
		return nil
	}
	if err != nil {
		return wrap(err, "reading")
	}
	out, err := r.Client.Update(ctx, r.renewed(l, usage))
	if err != nil {
		return wrap(err, "renewing")
	}
	r.wrote(out, u)
	return nil
}

// renewed sets l's holder, duration and renew time, and its usage
// annotation to usage unless that is empty.
func (r *Renewer) renewed(l *coordinationv1.Lease, usage string) *coordinationv1.Lease {
	now := metav1.NewMicroTime(r.now())
	seconds := int32(r.Duration / time.Second)
	holder := r.Node
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &seconds, &now
	if usage != "" {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[gpusharev1.UsageAnnotation] = usage
	}
	return l
}

// wrote keeps the lease a write returned, and u as the sample on it.
func (r *Renewer) wrote(l *coordinationv1.Lease, u *gpusharev1.GPUUsage) {
	if l != nil && l.ResourceVersion != "" {
		r.lease = l
	}
	if u != nil {
		r.mu.Lock()
		r.written = u
		r.mu.Unlock()
	}
}

func (r *Renewer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s the lease: %w", what, err)
}
