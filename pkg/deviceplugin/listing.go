package deviceplugin

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A listing is what the kubelet's PodResources API said of the node's
// pods (List) or of one pod (Get): which containers hold which devices.
//
// It is decoded from the wire by hand, keeping only what find needs. The
// kubelet sends one message per device ID, and with memory tokens a node
// of 100 containers holds 100,000 IDs: the generated decoder spends about
// 100 ms and 400,000 allocations (18 MiB) on such a listing, and a burst
// of starts takes many.
type listing struct {
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

// listedContainer is a container of a listing.
type listedContainer struct {
	namespace, pod, name string
	held                 []heldIDs
}

// heldIDs are the device IDs of a resource that a container holds, in
// the kubelet's order (of a map: none).
type heldIDs struct {
	resource string
	ids      []string
}

// of returns the IDs of resource that c holds.
func (c *listedContainer) of(resource string) []string {
	for _, h := range c.held {
		if h.resource == resource {
			return h.ids
		}
	}
	return nil
}

// find returns the container that holds exactly ids of resource. App
// containers reuse the devices of init containers, and the listing leaves
// out init containers that are not sidecars, so devices a listed
// container holds more of belong to an init container of its pod: find
// returns that pod with Init set.
func (l *listing) find(resource string, ids []string) (holder, error) {
	if len(ids) == 0 {
		return holder{}, errors.New("no device IDs")
	}
	want := ids
	if !slices.IsSorted(ids) {
		want = slices.Sorted(slices.Values(ids))
	}
	for _, i := range l.byFirst[resource+"\x00"+want[0]] {
		if c := &l.containers[i]; same(c.of(resource), want) {
			return holder{Namespace: c.namespace, Pod: c.pod, Container: c.name}, nil
		}
	}
	// Not one container's devices: look for a container holding them
	// among more (an init container's, reused).
	var within *holder
	for i := range l.containers {
		c := &l.containers[i]
		if held := c.of(resource); slices.Contains(held, want[0]) {
			held = slices.Clone(held)
			slices.Sort(held)
			if subset(want, held) {
				within = &holder{Namespace: c.namespace, Pod: c.pod, Init: true}
			}
		}
	}
	if within != nil {
		return *within, nil
	}
	return holder{}, errNotHeld
}

// same reports whether held, in any order, are the IDs of sorted want,
// each once.
func same(held, want []string) bool {
	if len(held) != len(want) {
		return false
	}
	seen := make([]bool, len(want))
	for _, id := range held {
		i, ok := slices.BinarySearch(want, id)
		if !ok || seen[i] {
			return false
		}
		seen[i] = true
	}
	return true
}

// shows reports whether the listing shows the pod holding devices of
// resource.
func (l *listing) shows(resource, namespace, name string) bool {
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

// maxResourceNames bounds the resource names of a listing.
const maxResourceNames = 64

// decodeListing decodes a ListPodResourcesResponse (list) or a
// GetPodResourcesResponse.
func decodeListing(b []byte, list bool) (*listing, error) {
	d := decoder{l: &listing{}, names: map[string]string{}, text: string(b)}
	field := protowire.Number(getPodResources)
	if list {
		field = listPodResources
	}
	err := fields(b, 0, func(num protowire.Number, v []byte, at int) error {
		if num != field {
			return nil
		}
		// A node's listing takes tens of ms to decode: let the
		// PreStartContainer calls waiting for a thread run between pods.
		runtime.Gosched()
		return d.pod(v, at)
	})
	if err != nil {
		return nil, fmt.Errorf("decoding the kubelet's pod resources: %w", err)
	}
	d.index()
	return d.l, nil
}

// decoder builds a listing.
type decoder struct {
	l *listing
	// names interns resource names: each device ID comes with one.
	names map[string]string
	// text is the message as a string: the listing's strings are cut
	// from it, not allocated one by one.
	text string
	// ids is reused for each device entry: offsets and lengths.
	ids [][2]int
}

type part struct {
	v  []byte
	at int
}

func (d *decoder) pod(b []byte, at int) error {
	var namespace, name string
	var containers []part
	err := fields(b, at, func(num protowire.Number, v []byte, at int) error {
		switch num {
		case podName:
			name = d.text[at : at+len(v)]
		case podNamespace:
			namespace = d.text[at : at+len(v)]
		case podContainers:
			containers = append(containers, part{v, at})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range containers {
		if err := d.container(namespace, name, c.v, c.at); err != nil {
			return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
		}
	}
	return nil
}

func (d *decoder) container(namespace, pod string, b []byte, at int) error {
	c := listedContainer{namespace: namespace, pod: pod}
	err := fields(b, at, func(num protowire.Number, v []byte, at int) error {
		switch num {
		case containerName:
			c.name = d.text[at : at+len(v)]
		case containerDevices:
			return d.devices(&c, v, at)
		}
		return nil
	})
	if err != nil {
		return err
	}
	d.l.containers = append(d.l.containers, c)
	return nil
}

func (d *decoder) devices(c *listedContainer, b []byte, at int) error {
	var resource string
	d.ids = d.ids[:0]
	err := fields(b, at, func(num protowire.Number, v []byte, at int) error {
		switch num {
		case devicesResource:
			r, ok := d.names[string(v)]
			if !ok {
				if len(d.names) == maxResourceNames {
					return fmt.Errorf("more than %d resource names", maxResourceNames)
				}
				r = d.text[at : at+len(v)]
				d.names[r] = r
			}
			resource = r
		case devicesIDs:
			d.ids = append(d.ids, [2]int{at, at + len(v)})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(d.ids) == 0 {
		return nil
	}
	i := slices.IndexFunc(c.held, func(h heldIDs) bool { return h.resource == resource })
	if i < 0 {
		i = len(c.held)
		c.held = append(c.held, heldIDs{resource: resource})
	}
	for _, id := range d.ids {
		c.held[i].ids = append(c.held[i].ids, d.text[id[0]:id[1]])
	}
	return nil
}

// index fills byFirst and shown.
func (d *decoder) index() {
	l := d.l
	l.byFirst, l.shown = map[string][]int{}, map[string]bool{}
	for i := range l.containers {
		c := &l.containers[i]
		for _, h := range c.held {
			k := h.resource + "\x00" + slices.Min(h.ids)
			l.byFirst[k] = append(l.byFirst[k], i)
			l.shown[h.resource+"\x00"+c.namespace+"/"+c.pod] = true
		}
	}
}

// fields calls fn with each length-delimited field of message b, which
// begins at offset at of the whole, and the field's offset; other fields
// are skipped.
func fields(b []byte, at int, fn func(num protowire.Number, v []byte, at int) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b, at = b[n:], at+n
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b, at = b[n:], at+n
			continue
		}
		size, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if size > uint64(len(b)-n) {
			return io.ErrUnexpectedEOF
		}
		end := n + int(size)
		if err := fn(num, b[n:end], at+n); err != nil {
			return err
		}
		b, at = b[end:], at+end
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
