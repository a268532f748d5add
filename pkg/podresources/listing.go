package podresources

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// A Listing is what the kubelet's PodResources API said of the node's
// pods (List) or of one pod (Get): which containers hold which devices.
//
// It is decoded from the wire by hand, keeping only what find needs. The
// kubelet sends one message per device ID, and with memory tokens a node
// of 100 containers holds 100,000 IDs: the generated decoder spends 4-5
// times the time and 350 times the allocations on such a listing
// (BenchmarkDecodeListing), and a burst of starts takes many.
type Listing struct {
	// started is when it was asked for.
	started time.Time
	err     error

	containers []listedContainer
	// byFirst indexes containers by resource and lowest device ID: a
	// burst of containers starting at once each looks itself up.
	byFirst map[string][]int
	// shown holds resource+"\x00"+namespace/name of each pod with a
	// container holding devices of resource.
	shown map[string]bool
}

// Started is when the listing was asked for.
func (l *Listing) Started() time.Time { return l.started }

// Each calls fn with each device ID set the listing shows a container
// holding: the container (Hooked set if it holds hooks), the resource and
// the IDs, sorted.
func (l *Listing) Each(fn func(h Holder, resource string, ids []string)) {
	for i := range l.containers {
		c := &l.containers[i]
		h := Holder{Namespace: c.namespace, Pod: c.pod, Container: c.name, Hooked: c.hooked()}
		for _, held := range c.held {
			fn(h, held.resource, held.ids.sorted())
		}
	}
}

// Holder is the pod container that holds some devices.
type Holder struct {
	Namespace, Pod, Container string
	// Init is set when the devices belong to an init container of the
	// pod, not yet known which.
	Init bool
	// Hooked is set when the kubelet gave the listed container hooks
	// (gpusharev1.HookResource); an init container it found the devices
	// within holds them then too, allocated at the same admission.
	Hooked bool
}

// ErrNotHeld says no container holds the devices (yet).
var ErrNotHeld = errors.New("no container holds these devices")

// inOrder returns ids sorted: ids itself if they are, else a sorted copy.
func inOrder(ids []string) []string {
	if slices.IsSorted(ids) {
		return ids
	}
	return slices.Sorted(slices.Values(ids))
}

// listedContainer is a container of a listing.
type listedContainer struct {
	namespace, pod, name string
	held                 []heldIDs
}

// heldIDs are the device IDs of a resource that a container holds, in
// the kubelet's order (of a map: none).
type heldIDs struct {
	resource string
	ids      idList
}

// idList is device IDs: spans of text, a listing's IDs back to back. A
// node's listing names 100,000 IDs of a few bytes each: a string header
// each would take twice their size.
type idList struct {
	text  string
	spans [][2]uint32
}

func (l idList) len() int { return len(l.spans) }

func (l idList) at(i int) string { return l.text[l.spans[i][0]:l.spans[i][1]] }

func (l idList) min() string {
	m := l.at(0)
	for i := range l.spans {
		m = min(m, l.at(i))
	}
	return m
}

func (l idList) contains(id string) bool {
	for i := range l.spans {
		if l.at(i) == id {
			return true
		}
	}
	return false
}

// sorted returns the IDs, sorted.
func (l idList) sorted() []string {
	out := make([]string, len(l.spans))
	for i := range out {
		out[i] = l.at(i)
	}
	slices.Sort(out)
	return out
}

// of returns the IDs of resource that c holds.
func (c *listedContainer) of(resource string) idList {
	for _, h := range c.held {
		if h.resource == resource {
			return h.ids
		}
	}
	return idList{}
}

// hooked reports whether the kubelet gave c hooks.
func (c *listedContainer) hooked() bool { return c.of(gpusharev1.HookResource).len() > 0 }

// Find returns the container that holds exactly ids of resource. App
// containers reuse the devices of init containers, and the listing leaves
// out init containers that are not sidecars, so devices a listed
// container holds more of belong to an init container of its pod: Find
// returns that pod with Init set.
func (l *Listing) Find(resource string, ids []string) (Holder, error) {
	if len(ids) == 0 {
		return Holder{}, errors.New("no device IDs")
	}
	want := inOrder(ids)
	if h, ok := l.exact(resource, want); ok {
		return h, nil
	}
	// Not one container's devices: look for a container holding them
	// among more (an init container's, reused).
	var within *Holder
	for i := range l.containers {
		c := &l.containers[i]
		if held := c.of(resource); held.contains(want[0]) {
			if subset(want, held.sorted()) {
				within = &Holder{Namespace: c.namespace, Pod: c.pod, Init: true, Hooked: c.hooked()}
			}
		}
	}
	if within != nil {
		return *within, nil
	}
	return Holder{}, ErrNotHeld
}

// exact returns the container that holds exactly the sorted IDs want of
// resource.
func (l *Listing) exact(resource string, want []string) (Holder, bool) {
	for _, i := range l.byFirst[resource+"\x00"+want[0]] {
		if c := &l.containers[i]; same(c.of(resource), want) {
			return Holder{Namespace: c.namespace, Pod: c.pod, Container: c.name, Hooked: c.hooked()}, true
		}
	}
	return Holder{}, false
}

// same reports whether held, in any order, are the IDs of sorted want,
// each once.
func same(held idList, want []string) bool {
	if held.len() != len(want) {
		return false
	}
	seen := make([]bool, len(want))
	for j := range held.spans {
		i, ok := slices.BinarySearch(want, held.at(j))
		if !ok || seen[i] {
			return false
		}
		seen[i] = true
	}
	return true
}

// Shows reports whether the listing shows the pod holding devices of
// resource.
func (l *Listing) Shows(resource, namespace, name string) bool {
	return l.shown[resource+"\x00"+namespace+"/"+name]
}

// subset reports whether sorted a is within sorted b.
func subset(a, b []string) bool {
	i := 0
	for _, x := range b {
		if i < len(a) && a[i] == x {
			i++
		}
	}
	return i == len(a)
}

// Field numbers of k8s.io/kubelet/pkg/apis/podresources/v1 (api.proto).
const (
	listPodResources = 1 // ListPodResourcesResponse.pod_resources, repeated
	getPodResources  = 1 // GetPodResourcesResponse.pod_resources
	podName          = 1 // PodResources.name
	podNamespace     = 2 // PodResources.namespace
	podContainers    = 3 // PodResources.containers, repeated
	containerName    = 1 // ContainerResources.name
	containerDevices = 2 // ContainerResources.devices, repeated
	devicesResource  = 1 // ContainerDevices.resource_name
	devicesIDs       = 2 // ContainerDevices.device_ids, repeated
)

// Decode decodes a ListPodResourcesResponse (list) or a
// GetPodResourcesResponse.
func Decode(b []byte, list bool) (*Listing, error) {
	d := decoder{l: &Listing{}, names: map[string]string{}}
	// Each device entry carries its resource's name with its ID: the
	// IDs are a small part of the message.
	d.ids.Grow(len(b) / 4)
	field := protowire.Number(getPodResources)
	if list {
		field = listPodResources
	}
	err := fields(b, func(num protowire.Number, v []byte) error {
		if num != field {
			return nil
		}
		// A node's listing takes tens of ms to decode: let the
		// PreStartContainer calls waiting for a thread run between pods.
		runtime.Gosched()
		return d.pod(v)
	})
	if err != nil {
		return nil, fmt.Errorf("decoding the kubelet's pod resources: %w", err)
	}
	d.index()
	return d.l, nil
}

// decoder builds a listing.
type decoder struct {
	l *Listing
	// names interns resource names: each device ID comes with one.
	names map[string]string
	// ids are the listing's device IDs back to back.
	ids strings.Builder
	// entry is reused for each device entry: its IDs' spans of ids.
	entry [][2]uint32
}

func (d *decoder) pod(b []byte) error {
	var namespace, name string
	var containers [][]byte
	err := fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case podName:
			name = string(v)
		case podNamespace:
			namespace = string(v)
		case podContainers:
			containers = append(containers, v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range containers {
		if err := d.container(namespace, name, c); err != nil {
			return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
		}
	}
	return nil
}

func (d *decoder) container(namespace, pod string, b []byte) error {
	c := listedContainer{namespace: namespace, pod: pod}
	err := fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case containerName:
			c.name = string(v)
		case containerDevices:
			return d.devices(&c, v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	d.l.containers = append(d.l.containers, c)
	return nil
}

func (d *decoder) devices(c *listedContainer, b []byte) error {
	var resource string
	d.entry = d.entry[:0]
	err := fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case devicesResource:
			r, ok := d.names[string(v)]
			if !ok {
				r = string(v)
				d.names[r] = r
			}
			resource = r
		case devicesIDs:
			if d.ids.Len()+len(v) > math.MaxUint32 {
				return errors.New("device IDs past 4 GiB")
			}
			start := d.ids.Len()
			d.ids.Write(v)
			d.entry = append(d.entry, [2]uint32{uint32(start), uint32(d.ids.Len())})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(d.entry) == 0 {
		return nil
	}
	i := slices.IndexFunc(c.held, func(h heldIDs) bool { return h.resource == resource })
	if i < 0 {
		i = len(c.held)
		c.held = append(c.held, heldIDs{resource: resource})
	}
	c.held[i].ids.spans = append(c.held[i].ids.spans, d.entry...)
	return nil
}

// index gives each container's IDs their text and fills byFirst and
// shown.
func (d *decoder) index() {
	l := d.l
	text := d.ids.String()
	l.byFirst, l.shown = map[string][]int{}, map[string]bool{}
	for i := range l.containers {
		c := &l.containers[i]
		for j := range c.held {
			h := &c.held[j]
			h.ids.text = text
			k := h.resource + "\x00" + h.ids.min()
			l.byFirst[k] = append(l.byFirst[k], i)
			l.shown[h.resource+"\x00"+c.namespace+"/"+c.pod] = true
		}
	}
}

// fields calls fn with each length-delimited field of message b, in
// order; other fields are skipped.
func fields(b []byte, fn func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := fn(num, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// rawCodec sends a request as protobuf and hands back the response's
// bytes undecoded, into a *[]byte.
type rawCodec struct{}

// Name is the content subtype: the kubelet decodes the request and
// encodes the response as protobuf.
func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T is not a protobuf message", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: %T is not *[]byte", v)
	}
	*p = data.Materialize()
	return nil
}
