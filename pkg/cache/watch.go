package cache

import (
	"context"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// DropManagedFields is an informer transform that removes an object's
// managedFields before the informer stores it, as kube-scheduler does for
// its pods: the cache never reads them, and with them every pod an
// informer holds is larger by an entry per writer. It passes anything
// without object metadata (a deletion tombstone) as it is.
func DropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Watch feeds c from an informer factory's node and pod informers. The
// returned func reports whether c has taken in every node and pod of the
// informers' first lists: an informer that has synced may not yet have
// handed its objects to c, and a decision made before then sees part of
// the cluster (a large GPU missing, a booking not yet made).
func Watch(c *Cache, f informers.SharedInformerFactory) (synced func() bool, err error) {
	nodes, err := f.Core().V1().Nodes().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { setNode(c, obj) },
		UpdateFunc: func(_, obj any) { setNode(c, obj) },
		DeleteFunc: func(obj any) {
			if n, ok := unwrap(obj).(*corev1.Node); ok {
				c.RemoveNode(n.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	pods, err := f.Core().V1().Pods().Informer().AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if p, ok := obj.(*corev1.Pod); ok && initial {
				c.AdoptPod(p)
			} else {
				setPod(c, obj)
			}
		},
		UpdateFunc: func(_, obj any) { setPod(c, obj) },
		DeleteFunc: func(obj any) {
			if p, ok := unwrap(obj).(*corev1.Pod); ok {
				c.RemovePod(p.UID)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return func() bool { return nodes.HasSynced() && pods.HasSynced() }, nil
}

// WatchClaims feeds c the ResourceClaims of an informer factory: what
// their allocations hold of gpushare's DRA devices (SetClaim). The
// returned func reports whether c has taken in the first list.
func WatchClaims(c *Cache, f informers.SharedInformerFactory) (synced func() bool, err error) {
	reg, err := f.Resource().V1().ResourceClaims().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { setClaim(c, obj) },
		UpdateFunc: func(_, obj any) { setClaim(c, obj) },
		DeleteFunc: func(obj any) {
			if rc, ok := unwrap(obj).(*resourceapi.ResourceClaim); ok {
				c.RemoveClaim(rc.UID)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return reg.HasSynced, nil
}

func setClaim(c *Cache, obj any) {
	if rc, ok := obj.(*resourceapi.ResourceClaim); ok {
		c.SetClaim(rc)
	}
}

// WaitSynced blocks until synced reports true or ctx ends, and reports
// whether it did.
func WaitSynced(ctx context.Context, synced func() bool) bool {
	if synced() {
		return true
	}
	return toolscache.WaitForCacheSync(ctx.Done(), synced)
}

// WatchLeases feeds c the node daemons' leases until ctx ends. It runs an
// informer of its own on the leases of gpusharev1.LeaseNamespace instead
// of the scheduler's factory, whose informers must all sync before it
// schedules: a scheduler not allowed to list leases there (the role
// kubeadm gives kube-scheduler is not) then schedules as before, judging
// no node by a lease, and logs why. When the lease of a node whose daemon
// had stopped is renewed, recovered (if not nil) is told. The live GPU
// use a lease carries (gpusharev1.UsageAnnotation) goes to c.SetLive,
// parsed only when it changed.
func WatchLeases(ctx context.Context, c *Cache, client kubernetes.Interface, recovered func(node string)) {
	inf := coordinationinformers.NewFilteredLeaseInformer(client, gpusharev1.LeaseNamespace, 0, toolscache.Indexers{}, nil)
	// usage holds each node's usage annotation as last parsed: most
	// renewals carry the sample the one before did. The informer calls
	// the handlers one at a time.
	usage := make(map[string]string)
	set := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || !strings.HasPrefix(l.Name, gpusharev1.LeasePrefix) {
			return
		}
		node := strings.TrimPrefix(l.Name, gpusharev1.LeasePrefix)
		var expires time.Time
		if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
			expires = l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		}
		if value, seen := usage[node]; !seen || value != l.Annotations[gpusharev1.UsageAnnotation] {
			value = l.Annotations[gpusharev1.UsageAnnotation]
			usage[node] = value
			c.SetLive(node, leaseUsage(ctx, l, value))
		}
		if c.SetLease(node, expires) && recovered != nil {
			klog.FromContext(ctx).Info("gpushare-node renewed its lease again; retrying pending GPU pods", "node", node)
			recovered(node)
		}
	}
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if l, ok := unwrap(obj).(*coordinationv1.Lease); ok && strings.HasPrefix(l.Name, gpusharev1.LeasePrefix) {
				node := strings.TrimPrefix(l.Name, gpusharev1.LeasePrefix)
				delete(usage, node)
				c.RemoveLease(node)
			}
		},
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Watching node daemon leases")
		return
	}
	inf.Run(ctx.Done())
}

// leaseUsage parses value, the usage annotation of lease l; nil when
// empty or malformed.
func leaseUsage(ctx context.Context, l *coordinationv1.Lease, value string) *gpusharev1.GPUUsage {
	if value == "" {
		return nil
	}
	u, err := gpusharev1.ParseUsage(value)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Ignoring the GPU usage on a node daemon's lease", "lease", klog.KObj(l), "err", err)
		return nil
	}
	return u
}

// RunExpiry drops stale live GPU samples from c every 30 s until ctx
// ends, so that load-aware scoring of a node whose daemon went quiet falls
// back to bookings.
func RunExpiry(ctx context.Context, c *Cache) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.ExpireLive()
		}
	}
}

func unwrap(obj any) any {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

func setNode(c *Cache, obj any) {
	if n, ok := obj.(*corev1.Node); ok {
		c.SetNode(n)
	}
}

func setPod(c *Cache, obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		c.SetPod(p)
	}
}
