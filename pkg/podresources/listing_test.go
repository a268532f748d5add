package podresources

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// devices are the entries the kubelet sends for ids: one per device ID,
// with its NUMA node.
func devices(resource string, ids ...string) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for _, id := range ids {
		out = append(out, &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{id},
			Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: 1}}}})
	}
	return out
}

// testPods are a pod whose app container holds devices of two
// resources (and CPUs and memory, which a listing skips), and a second
// pod with a container that holds none.
func testPods() []*podresourcesapi.PodResources {
	return []*podresourcesapi.PodResources{
		{Namespace: "ns", Name: "a", Containers: []*podresourcesapi.ContainerResources{
			{Name: "main", Devices: append(devices("mem", "m-07", "m-03", "m-05", "m-04"), devices("core", "c-1")...),
				CpuIds: []int64{2, 3}, Memory: []*podresourcesapi.ContainerMemory{{MemoryType: "memory", Size: 1 << 30}}},
		}},
		{Namespace: "ns", Name: "b", Containers: []*podresourcesapi.ContainerResources{
			{Name: "main", Devices: devices("mem", "m-01", "m-02")},
			{Name: "sidecar"},
		}},
	}
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// find names the container holding exactly the IDs, in any order; IDs
// within a container's are an init container's of that pod; others are
// held by no one.
func TestListingFind(t *testing.T) {
	l, err := Decode(marshal(t, &podresourcesapi.ListPodResourcesResponse{PodResources: testPods()}), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		resource string
		ids      []string
		want     Holder
		err      error
	}{
		{"mem", []string{"m-05", "m-03", "m-07", "m-04"}, Holder{Namespace: "ns", Pod: "a", Container: "main"}, nil},
		{"core", []string{"c-1"}, Holder{Namespace: "ns", Pod: "a", Container: "main"}, nil},
		{"mem", []string{"m-02", "m-01"}, Holder{Namespace: "ns", Pod: "b", Container: "main"}, nil},
		{"mem", []string{"m-03", "m-04"}, Holder{Namespace: "ns", Pod: "a", Init: true}, nil},
		{"mem", []string{"m-01", "m-03"}, Holder{}, ErrNotHeld},
		{"core", []string{"m-01", "m-02"}, Holder{}, ErrNotHeld},
		{"mem", []string{"m-09"}, Holder{}, ErrNotHeld},
	} {
		got, err := l.Find(c.resource, c.ids)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("find(%s, %v) = %+v, %v; want %+v, %v", c.resource, c.ids, got, err, c.want, c.err)
		}
	}
	for _, c := range []struct {
		resource, pod string
		want          bool
	}{{"mem", "a", true}, {"core", "a", true}, {"mem", "b", true}, {"core", "b", false}, {"mem", "c", false}} {
		if got := l.Shows(c.resource, "ns", c.pod); got != c.want {
			t.Errorf("shows(%s, ns/%s) = %v, want %v", c.resource, c.pod, got, c.want)
		}
	}
}

// A Get answer decodes to a listing of its one pod.
func TestDecodeGet(t *testing.T) {
	l, err := Decode(marshal(t, &podresourcesapi.GetPodResourcesResponse{PodResources: testPods()[1]}), false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := held(l), held(generated(t, testPods()[1:])); !maps.Equal(got, want) {
		t.Errorf("decoded %v, want %v", got, want)
	}
}

// Decoding by hand agrees with the generated decoder, and a truncated
// listing is an error.
func TestDecodeListing(t *testing.T) {
	want := &podresourcesapi.ListPodResourcesResponse{PodResources: testPods()}
	for p := range 20 {
		c := &podresourcesapi.ContainerResources{Name: fmt.Sprintf("c%d", p%3)}
		for i := range p * 7 {
			c.Devices = append(c.Devices, devices("gpushare.io/gpu-mem", fmt.Sprintf("gpu-%d-mib-%05d", p%8, p*1000+i))...)
		}
		want.PodResources = append(want.PodResources, &podresourcesapi.PodResources{
			Namespace: "default", Name: fmt.Sprintf("p%d", p), Containers: []*podresourcesapi.ContainerResources{c}})
	}
	b := marshal(t, want)
	l, err := Decode(b, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := held(l), held(generated(t, want.PodResources)); !maps.Equal(got, want) {
		t.Errorf("decoded %d containers' devices, the generated decoder %d; they differ", len(got), len(want))
	}
	if _, err := Decode(b[:len(b)-3], true); err == nil {
		t.Error("a truncated listing decoded without error")
	}
}

// FuzzDecodeListing: any bytes decode without a panic, and where the
// generated decoder accepts them too, both say the same.
func FuzzDecodeListing(f *testing.F) {
	f.Add(marshal(f, &podresourcesapi.ListPodResourcesResponse{PodResources: testPods()}))
	f.Add([]byte{0x0a, 0x05, 0x1a, 0x03, 0x12, 0x01, 0x0a})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := Decode(b, true)
		var resp podresourcesapi.ListPodResourcesResponse
		if err != nil || proto.Unmarshal(b, &resp) != nil {
			return
		}
		if got, want := held(l), held(generated(t, resp.PodResources)); !maps.Equal(got, want) {
			t.Errorf("decoded %v, the generated decoder %v", got, want)
		}
	})
}

// generated is a listing of pods as the generated decoder reads them.
func generated(t testing.TB, pods []*podresourcesapi.PodResources) *Listing {
	t.Helper()
	l := &Listing{}
	for _, p := range pods {
		for _, c := range p.GetContainers() {
			lc := listedContainer{namespace: p.GetNamespace(), pod: p.GetName(), name: c.GetName()}
			for _, d := range c.GetDevices() {
				if len(d.GetDeviceIds()) == 0 {
					continue
				}
				i := slices.IndexFunc(lc.held, func(h heldIDs) bool { return h.resource == d.GetResourceName() })
				if i < 0 {
					i = len(lc.held)
					lc.held = append(lc.held, heldIDs{resource: d.GetResourceName()})
				}
				for _, id := range d.GetDeviceIds() {
					lc.held[i].ids.text += id
					lc.held[i].ids.spans = append(lc.held[i].ids.spans, [2]uint32{uint32(len(lc.held[i].ids.text) - len(id)), uint32(len(lc.held[i].ids.text))})
				}
			}
			l.containers = append(l.containers, lc)
		}
	}
	return l
}

// held flattens a listing: each container's device IDs by resource,
// sorted.
func held(l *Listing) map[string]string {
	out := map[string]string{}
	for i, c := range l.containers {
		for _, h := range c.held {
			ids := h.ids.sorted()
			out[fmt.Sprintf("%d %s/%s/%s %s", i, c.namespace, c.pod, c.name, h.resource)] = fmt.Sprint(ids)
		}
	}
	return out
}

// BenchmarkDecodeListing decodes a node's listing of 100 containers of
// 1 GiB in MiB tokens (102,400 device IDs, as the kubelet sends them:
// one entry each, in the order of a map), by hand and with the generated
// decoder.
func BenchmarkDecodeListing(b *testing.B) {
	resp := &podresourcesapi.ListPodResourcesResponse{}
	rnd := rand.New(rand.NewPCG(1, 2))
	for p := range 100 {
		ids := make([]string, 1024)
		for i := range ids {
			ids[i] = fmt.Sprintf("gpu-%d-mib-%05d", p%8, (p/8)*1024+i)
		}
		rnd.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		resp.PodResources = append(resp.PodResources, &podresourcesapi.PodResources{Namespace: "default", Name: fmt.Sprintf("pod-%03d", p),
			Containers: []*podresourcesapi.ContainerResources{{Name: "main", Devices: devices("gpushare.io/gpu-mem", ids...)}}})
	}
	data := marshal(b, resp)
	b.Run("gpushare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(data, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r podresourcesapi.ListPodResourcesResponse
			if err := proto.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
