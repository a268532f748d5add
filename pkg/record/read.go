package record

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// Reader reads what a pod's record books: the one set of rules every
// component that counts GPUs follows (the scheduler's cache, the
// extender, inspect, the node daemon's device plugin, the DRA driver's
// slice and Prepare, the usage metrics), so that they never disagree on
// which GPUs a pod holds.
//
// The rules, in order:
//   - a pod that ended (Ended) holds nothing;
//   - gpushare's record (gpusharev1.AllocationAnnotation) wins; else one
//     another system left (Foreign), translated through the pod's request;
//   - the pod must be bound, to the node the record names;
//   - the record is checked against the pod's request as it was when the
//     record was written (the record's Asked), on the node's GPUs.
//
// A record that passes the first three books what it names while the pod
// runs, even where the last check fails (the pod's request-shaping
// annotations were edited, the resource model changed, the record was
// written by hand): its containers run with those GPUs, so nothing else
// may land there. The failure is reported (Booking.Unconforming), and
// the node daemon gives such a pod's containers no GPU.
type Reader struct {
	// Requests translates a pod's spec into its request (resource.Model's
	// PodRequest). Without it records are not checked, and other
	// systems' records, which are read through the request, book nothing.
	Requests func(*corev1.Pod) (*alloc.PodRequest, error)
	// RequestAnnotations names the annotations that shape pod's request
	// (resource.Model's RequestAnnotations); nil for none.
	RequestAnnotations func(pod *corev1.Pod) []string
}

// Booking is what a pod's record books, as Reader.Read found it.
type Booking struct {
	// Value is the record's text: gpushare's annotation, or another
	// system's annotations (ForeignValue). It changes when the record does.
	Value string
	// System is nil for gpushare's record; else whose record it is
	// (ErrAliyunRecord, ErrElasticRecord, ErrHAMiRecord).
	System error
	// Allocation is the record; another system's is translated into
	// gpushare's, its GPUs named by index until On places it.
	Allocation *gpusharev1.Allocation
	// Placement is Allocation as the core's placement.
	Placement *alloc.Placement
	// Request is what the pod asked when its record was written (nil
	// without Reader.Requests, or when the request cannot be read).
	Request *alloc.PodRequest
	// Edited names the request-shaping annotations changed since the
	// record was written.
	Edited []string
	// Unconforming, if set, says why the record is not what the pod asks:
	// it books what it names all the same (see Reader).
	Unconforming error
	// Pinned is set on another system's record once placed on its node:
	// Placement then names its GPUs by UUID, and On places it as it does
	// gpushare's, so that an inventory that renumbers or loses GPUs moves
	// or keeps the booking with the GPU the pod holds rather than giving
	// it to whatever GPU now has the index (the scheduler's cache pins
	// them; a reader with no memory places by index each time).
	Pinned bool
}

// Why a pod's record books nothing; check with errors.Is.
var (
	// ErrNoRecord: the pod carries no record, gpushare's or another's.
	ErrNoRecord = errors.New("pod carries no allocation record")
	// ErrEnded: the pod succeeded or failed; its GPUs are free.
	ErrEnded = errors.New("pod ended")
	// ErrNotBound: the record is on a pod that is not bound.
	ErrNotBound = errors.New("pod is not bound to a node: a record books GPUs only on a pod the scheduler bound")
)

// ErrUnconforming marks the report of a record that books what it names
// though it is not what its pod asks (Booking.Unconforming).
var ErrUnconforming = errors.New("the record is booked as it stands")

// ErrOverCommitted marks the report of a record whose booking does not
// fit its GPUs beside the records booked before it: the node's GPUs
// changed under its pod, or it was written by hand or by a writer that
// did not count the others. Its GPUs are held full, and nothing more
// lands there until its pod or another goes.
var ErrOverCommitted = errors.New("the record's booking does not fit its GPUs beside the others " +
	"(the node's GPUs changed under the pod, or the record was not written by a scheduler that counted them); gpushare holds them full")

// Ended reports whether a pod no longer holds its GPUs.
func Ended(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// Ran reports whether pod's container (init or app) name has run: it
// runs, ran, or was started. A container its node refused has not.
func Ran(pod *corev1.Pod, name string) bool {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range list {
			if s.Name == name && (s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil ||
				s.Started != nil && *s.Started) {
				return true
			}
		}
	}
	return false
}

// Value returns pod's record as text, and whether pod has one:
// gpushare's first, else another system's (then Foreign says whose).
func Value(pod *corev1.Pod) (string, bool) {
	if v, ok := pod.Annotations[gpusharev1.AllocationAnnotation]; ok {
		return v, true
	}
	return ForeignValue(pod)
}

// Read returns what pod's record books, not yet placed on its node's GPUs
// (On does that), or why it books nothing (ErrNoRecord, ErrEnded,
// ErrNotBound, a record that cannot be read).
func (r Reader) Read(pod *corev1.Pod) (*Booking, error) {
	if Ended(pod) {
		return nil, ErrEnded
	}
	value, ok := Value(pod)
	if !ok {
		return nil, ErrNoRecord
	}
	if _, own := pod.Annotations[gpusharev1.AllocationAnnotation]; !own {
		return r.readForeign(pod, value, Foreign(pod))
	}
	a, err := gpusharev1.ParseAllocation(value)
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName == "" {
		return nil, ErrNotBound
	}
	if pod.Spec.NodeName != a.Node {
		return nil, fmt.Errorf("pod is bound to node %s but its allocation is for node %s", pod.Spec.NodeName, a.Node)
	}
	p, err := PlacementFrom(a, nil)
	if err != nil {
		return nil, err
	}
	b := &Booking{Value: value, Allocation: a, Placement: p}
	if r.Requests == nil {
		return b, nil
	}
	b.Edited = r.edited(pod, a.Asked)
	req, err := r.Requests(r.asked(pod, a.Asked))
	if err != nil {
		b.Unconforming = fmt.Errorf("%w: the pod's own request: %w", alloc.ErrNonconforming, err)
		return b, nil
	}
	b.Request = req
	b.Unconforming = alloc.Conform(p, req, nil)
	return b, nil
}

// readForeign is Read for another system's record, translated through
// the pod's own request (ForeignAllocation). The other system read none
// of gpushare's request-shaping annotations: adding or editing one later
// changes nothing of what it books.
func (r Reader) readForeign(pod *corev1.Pod, value string, sys error) (*Booking, error) {
	if pod.Spec.NodeName == "" {
		return nil, fmt.Errorf("%w: %w", sys, ErrNotBound)
	}
	if r.Requests == nil {
		return nil, fmt.Errorf("%w: no request model to read it by", sys)
	}
	req, err := r.Requests(r.asked(pod, &gpusharev1.Asked{}))
	var unread error
	switch {
	case err != nil:
		unread = fmt.Errorf("the pod's own request: %w", err)
	case req == nil || !req.GPUs():
		unread = errors.New("the resource model reads no GPU request from the pod")
	}
	if unread != nil {
		// Fail closed: where the record names GPUs for containers that
		// ask the system's resources, it holds them whole. The pod's
		// containers run on them, whatever the model now says.
		whole, werr := wholeRequest(pod, sys)
		switch {
		case werr == nil:
			req = whole
		case err != nil:
			return nil, fmt.Errorf("%w: %w", sys, unread)
		default:
			// Nothing of the system's asked: its own reading says so.
			unread = nil
		}
	}
	a, err := ForeignAllocation(pod, req)
	if err != nil {
		return nil, err
	}
	p, err := PlacementFrom(a, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sys, err)
	}
	b := &Booking{Value: value, System: sys, Allocation: a, Placement: p, Request: req}
	if unread != nil {
		b.Unconforming = fmt.Errorf("%w: %w: %w; holding the GPUs it names whole", alloc.ErrNonconforming, sys, unread)
	}
	return b, nil
}

// On returns a copy of b placed on node's GPUs, named by UUID (gpushare's
// record) or by index (another system's, whose whole and percent shares
// take the sizes of the node's GPUs), checked against the pod's request
// there. A GPU the node does not list is an error: the record cannot be
// placed. A check that fails sets Unconforming and books all the same.
//
// held, if not nil, is node with the GPUs appended that records still
// hold and node no longer lists (the scheduler's cache keeps them booked
// until their pods go): gpushare's records are placed on it.
func (b *Booking) On(node, held *alloc.Node) (*Booking, error) {
	if held == nil {
		held = node
	}
	out := *b
	p := b.Placement
	if b.System != nil && !b.Pinned {
		a, err := OnNode(b.Allocation, b.Request, node.GPUs)
		if err == nil {
			p, err = PlacementFrom(a, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", b.System, err)
		}
		out.Allocation = a
	}
	p, err := PlaceOn(p, held)
	if err != nil {
		if b.System != nil {
			err = fmt.Errorf("%w: %w", b.System, err)
		}
		return nil, err
	}
	out.Placement = p
	if b.Request != nil && b.Unconforming == nil {
		out.Unconforming = alloc.Conform(p, b.Request, node)
		if out.Unconforming != nil && b.System != nil {
			out.Unconforming = fmt.Errorf("%w: %w", b.System, out.Unconforming)
		}
	}
	return &out, nil
}

// Problem returns why b's pod should get no GPU from the node daemon, or
// nil: its request was edited since binding, or the record does not
// conform. Both keep booking what the record names.
func (b *Booking) Problem() error {
	if len(b.Edited) > 0 {
		return fmt.Errorf("%w: %s; recreate the pod to change its request", ErrRequestEdited, strings.Join(b.Edited, ", "))
	}
	return b.Unconforming
}

// PlaceOn returns a copy of p, a record's placement, on node's GPUs
// named by UUID: the index a record gives is where the GPU was when it
// was written, and a driver may renumber GPUs.
func PlaceOn(p *alloc.Placement, node *alloc.Node) (*alloc.Placement, error) {
	if p.Node != node.Name {
		return nil, fmt.Errorf("allocation is for node %s, not %s", p.Node, node.Name)
	}
	out := *p
	out.Containers = slices.Clone(p.Containers)
	for ci := range out.Containers {
		gpus := slices.Clone(out.Containers[ci].GPUs)
		for k := range gpus {
			i := slices.IndexFunc(node.GPUs, func(g alloc.GPU) bool { return g.UUID == gpus[k].UUID })
			if i < 0 {
				return nil, fmt.Errorf("container %s: node %s has no GPU with UUID %s", out.Containers[ci].Name, node.Name, gpus[k].UUID)
			}
			// The node's copy of the UUID: the record's can go.
			gpus[k].GPU, gpus[k].UUID = i, node.GPUs[i].UUID
		}
		out.Containers[ci].GPUs = gpus
	}
	out.Booked = alloc.Booking(out.Containers)
	return &out, nil
}

// edited names the request-shaping annotations of pod that differ from
// those asked keeps; none for a record written before Asked existed.
func (r Reader) edited(pod *corev1.Pod, asked *gpusharev1.Asked) []string {
	if asked == nil || r.RequestAnnotations == nil {
		return nil
	}
	return asked.Edited(pod.Annotations, r.RequestAnnotations(pod))
}

// asked returns pod with its request-shaping annotations as asked has
// them: with a record's Asked, the pod as it was when the record was
// written. pod itself where they are the same, or asked is nil (a record
// written before Asked existed).
func (r Reader) asked(pod *corev1.Pod, asked *gpusharev1.Asked) *corev1.Pod {
	if asked == nil || r.RequestAnnotations == nil {
		return pod
	}
	keys := r.RequestAnnotations(pod)
	if len(asked.Edited(pod.Annotations, keys)) == 0 {
		return pod
	}
	bound := *pod
	bound.Annotations = asked.Apply(pod.Annotations, keys)
	return &bound
}

// Book returns what pod's record books on node, placed on its GPUs
// (On), or nothing with why.
func (r Reader) Book(pod *corev1.Pod, node *alloc.Node) (*Booking, error) {
	b, err := r.Read(pod)
	if err != nil {
		return nil, err
	}
	return b.On(node, nil)
}

// Holds returns what pod's record holds, its GPUs named by UUID, for
// readers that count by UUID (the DRA driver, the usage metrics):
// gpushare's record as it names them, even a GPU node no longer lists
// (the scheduler keeps such a GPU booked until the pod goes); another
// system's placed on node (On), which its indexes name.
func (r Reader) Holds(pod *corev1.Pod, node *alloc.Node) (*Booking, error) {
	b, err := r.Read(pod)
	if err != nil || b.System == nil {
		return b, err
	}
	return b.On(node, nil)
}
