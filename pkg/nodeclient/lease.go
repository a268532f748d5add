package nodeclient

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Leases reads and writes the daemon's Lease, over a REST client whose
// scheme holds coordination/v1 only (see the package comment).
type Leases struct {
	rest rest.Interface
}

// NewLeases returns a Leases client for the API server in config.
func NewLeases(config *rest.Config) (*Leases, error) {
	rc, err := restClient(config, "/apis", coordinationv1.SchemeGroupVersion, coordinationv1.AddToScheme)
	if err != nil {
		return nil, fmt.Errorf("coordination/v1 client: %w", err)
	}
	return &Leases{rest: rc}, nil
}

// Get reads a lease.
func (l *Leases) Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rest.Get().Namespace(namespace).Resource("leases").Name(name).Do(ctx).Into(out)
	return out, err
}

// Create creates a lease.
func (l *Leases) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rest.Post().Namespace(lease.Namespace).Resource("leases").VersionedParams(&metav1.CreateOptions{}, metav1.ParameterCodec).
		Body(lease).Do(ctx).Into(out)
	return out, err
}

// Update replaces a lease.
func (l *Leases) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rest.Put().Namespace(lease.Namespace).Resource("leases").Name(lease.Name).
		VersionedParams(&metav1.UpdateOptions{}, metav1.ParameterCodec).Body(lease).Do(ctx).Into(out)
	return out, err
}
