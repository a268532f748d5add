package resource

import (
	"fmt"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// RequestError says why a pod's GPU request cannot be translated. It wraps
// alloc.ErrInvalidRequest: no node could ever take the pod as written.
type RequestError struct {
	// Pod is the pod's namespace/name.
	Pod string
	// Container is the container at fault; empty for a pod-wide problem.
	Container string
	// Resource is the resource name or annotation key at fault.
	Resource string
	// Reason says what is wrong and what to ask instead.
	Reason string
}

func (e *RequestError) Error() string {
	if e.Container == "" {
		return fmt.Sprintf("pod %q: %s: %s", e.Pod, e.Resource, e.Reason)
	}
	return fmt.Sprintf("container %q: %s: %s", e.Container, e.Resource, e.Reason)
}

// Unwrap returns alloc.ErrInvalidRequest, so errors.Is(err,
// alloc.ErrInvalidRequest) holds.
func (e *RequestError) Unwrap() error { return alloc.ErrInvalidRequest }
