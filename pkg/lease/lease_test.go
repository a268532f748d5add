package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeLeases holds leases in a map and counts calls.
type fakeLeases struct {
	leases          map[string]*coordinationv1.Lease
	creates, writes int
	fail            error
}

func (f *fakeLeases) Get(_ context.Context, ns, name string) (*coordinationv1.Lease, error) {
	if f.fail != nil {
		return nil, f.fail
	}
	l, ok := f.leases[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, name)
	}
	return l.DeepCopy(), nil
}

func (f *fakeLeases) Create(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	f.creates++
	f.leases[l.Namespace+"/"+l.Name] = l.DeepCopy()
	return l, nil
}

func (f *fakeLeases) Update(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	f.writes++
	f.leases[l.Namespace+"/"+l.Name] = l.DeepCopy()
	return l, nil
}

func TestRenew(t *testing.T) {
	f := &fakeLeases{leases: map[string]*coordinationv1.Lease{}}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Renewer{Client: f, Node: "gpu-a", Duration: 40 * time.Second, Now: func() time.Time { return at }}
	if err := r.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	at = at.Add(10 * time.Second)
	if err := r.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := f.leases["kube-system/gpushare-node-gpu-a"]
	switch {
	case f.creates != 1 || f.writes != 1:
		t.Fatalf("%d creates and %d updates, want one each", f.creates, f.writes)
	case l == nil || *l.Spec.HolderIdentity != "gpu-a" || *l.Spec.LeaseDurationSeconds != 40:
		t.Fatalf("lease %+v, want held by gpu-a for 40 s", l)
	case !l.Spec.RenewTime.Time.Equal(at) || !l.Spec.AcquireTime.Time.Equal(at.Add(-10*time.Second)):
		t.Fatalf("renewed at %v, acquired at %v; want %v and 10 s before", l.Spec.RenewTime, l.Spec.AcquireTime, at)
	}
	f.fail = errors.New("forbidden")
	if err := r.Renew(context.Background()); err == nil || !errors.Is(err, f.fail) {
		t.Fatalf("Renew = %v, want the client's error", err)
	}
}
