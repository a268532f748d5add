package lease

import (
	"context"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// versionedLeases is a lease store that checks resource versions, as the
// apiserver does, and counts reads.
type versionedLeases struct {
	fakeLeases
	gets, rv int
}

func (f *versionedLeases) Get(ctx context.Context, ns, name string) (*coordinationv1.Lease, error) {
	f.gets++
	return f.fakeLeases.Get(ctx, ns, name)
}

func (f *versionedLeases) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	f.rv++
	l = l.DeepCopy()
	l.ResourceVersion = strconv.Itoa(f.rv)
	_, err := f.fakeLeases.Create(ctx, l)
	return l.DeepCopy(), err
}

func (f *versionedLeases) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	cur, ok := f.leases[l.Namespace+"/"+l.Name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, l.Name)
	}
	if cur.ResourceVersion != l.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, l.Name, nil)
	}
	f.rv++
	l = l.DeepCopy()
	l.ResourceVersion = strconv.Itoa(f.rv)
	_, err := f.fakeLeases.Update(ctx, l)
	return l.DeepCopy(), err
}

func sample(at time.Time, util, mem int64) *gpusharev1.GPUUsage {
	return &gpusharev1.GPUUsage{Time: metav1.NewTime(at),
		GPUs: []gpusharev1.GPULoad{{Index: 0, UtilizationPercent: util, UsedMemoryMiB: mem}}}
}

// The lease carries the latest live use with each renewal; only a sample
// that moved by the threshold asks for a write before the next renewal;
// renewals update the lease as the last write left it, reading it again
// only after someone else wrote it.
func TestRenewCarriesUsage(t *testing.T) {
	ctx := context.Background()
	f := &versionedLeases{fakeLeases: fakeLeases{leases: map[string]*coordinationv1.Lease{}}}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Renewer{Client: f, Node: "gpu-a", Duration: 40 * time.Second, Now: func() time.Time { return at }}
	woken := func() bool {
		select {
		case <-r.wakeChan():
			return true
		default:
			return false
		}
	}
	onLease := func() *gpusharev1.GPUUsage {
		t.Helper()
		u, err := gpusharev1.ParseUsage(f.leases["kube-system/gpushare-node-gpu-a"].Annotations[gpusharev1.UsageAnnotation])
		if err != nil {
			t.Fatal(err)
		}
		return u
	}

	if err := r.PublishUsage(ctx, sample(at, 50, 4000)); err != nil {
		t.Fatal(err)
	}
	if !woken() {
		t.Fatal("the first sample did not ask for a write")
	}
	if err := r.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if u := onLease(); u.GPUs[0].UtilizationPercent != 50 {
		t.Fatalf("lease carries %+v, want the first sample", u)
	}

	// A small move waits for the renewal, which carries it.
	at = at.Add(10 * time.Second)
	_ = r.PublishUsage(ctx, sample(at, 55, 4200))
	if woken() {
		t.Fatal("a move below the threshold asked for a write of its own")
	}
	if err := r.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if u := onLease(); u.GPUs[0].UtilizationPercent != 55 || !u.Time.Time.Equal(at) {
		t.Fatalf("lease carries %+v, want the renewal to carry the latest sample", u)
	}
	// A large one is written at once; the threshold is against what the
	// lease holds, so that small moves do not add up unseen.
	_ = r.PublishUsage(ctx, sample(at, 64, 4200))
	if woken() {
		t.Fatal("9 points from the lease's sample asked for a write")
	}
	_ = r.PublishUsage(ctx, sample(at, 55, 4800))
	if !woken() {
		t.Fatal("600 MiB more memory in use did not ask for a write")
	}
	if f.gets != 1 || f.creates != 1 || f.writes != 1 {
		t.Fatalf("%d reads, %d creates, %d updates; want renewals to update without reading", f.gets, f.creates, f.writes)
	}

	// Someone else writes the lease: the next renewal conflicts, reads
	// it and renews it.
	other := f.leases["kube-system/gpushare-node-gpu-a"]
	f.rv++
	other.ResourceVersion = strconv.Itoa(f.rv)
	if err := r.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if f.gets != 2 || f.writes != 2 {
		t.Fatalf("%d reads, %d updates after a conflict; want one more of each", f.gets, f.writes)
	}
	if u := onLease(); u.GPUs[0].UsedMemoryMiB != 4800 {
		t.Fatalf("lease carries %+v after the conflict, want the latest sample", u)
	}
}
