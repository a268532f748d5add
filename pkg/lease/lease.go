package lease

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// Client reads and writes leases.
type Client interface {
	Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// Renewer renews node's lease every Duration/4, as the kubelet renews
// its node lease, so that a missed renewal or two does not let it lapse.
type Renewer struct {
	Client   Client
	Node     string
	Duration time.Duration
	// Now is the clock; time.Now if nil.
	Now func() time.Time
}

// Name is the lease of node's daemon.
func Name(node string) string { return gpusharev1.LeasePrefix + node }

// Run renews the lease until ctx ends. Failures are logged and retried
// at the next interval: a daemon that cannot renew is, to the scheduler,
// a daemon that stopped.
func (r *Renewer) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(r.Duration / 4)
	defer t.Stop()
	for {
		if err := r.Renew(ctx); err != nil {
			logger.Error(err, "Renewing the node daemon's lease failed; the scheduler sends no GPU pod here once it expires",
				"lease", klog.KRef(gpusharev1.LeaseNamespace, Name(r.Node)), "duration", r.Duration)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Renew sets the lease's renew time to now, creating the lease if it is
// missing.
func (r *Renewer) Renew(ctx context.Context) error {
	now := metav1.NewMicroTime(r.now())
	seconds := int32(r.Duration / time.Second)
	holder := r.Node
	l, err := r.Client.Get(ctx, gpusharev1.LeaseNamespace, Name(r.Node))
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: Name(r.Node), Namespace: gpusharev1.LeaseNamespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds,
				AcquireTime: &now, RenewTime: &now},
		}
		_, err = r.Client.Create(ctx, l)
		return wrap(err, "creating")
	}
	if err != nil {
		return wrap(err, "reading")
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &seconds, &now
	_, err = r.Client.Update(ctx, l)
	return wrap(err, "renewing")
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
