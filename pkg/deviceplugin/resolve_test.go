package deviceplugin

import (
	"errors"
	"testing"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// A listing as the kubelet sends it: one entry per device ID. A pod
// with an init container whose devices its app container reuses, and
// a second pod.
func testListing() *listing {
	devices := func(resource string, ids ...string) []*podresourcesapi.ContainerDevices {
		var out []*podresourcesapi.ContainerDevices
		for _, id := range ids {
			out = append(out, &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{id}})
		}
		return out
	}
	return &listing{resp: &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Namespace: "ns", Name: "a", Containers: []*podresourcesapi.ContainerResources{
			{Name: "main", Devices: append(devices("mem", "m-07", "m-03", "m-05", "m-04"), devices("core", "c-1")...)},
		}},
		{Namespace: "ns", Name: "b", Containers: []*podresourcesapi.ContainerResources{
			{Name: "main", Devices: devices("mem", "m-01", "m-02")},
		}},
	}}}
}

// find names the container holding exactly the IDs, in any order; IDs
// within a container's are an init container's of that pod; others are
// held by no one.
func TestListingFind(t *testing.T) {
	l := testListing()
	for _, c := range []struct {
		resource string
		ids      []string
		want     holder
		err      error
	}{
		{"mem", []string{"m-05", "m-03", "m-07", "m-04"}, holder{Namespace: "ns", Pod: "a", Container: "main"}, nil},
		{"core", []string{"c-1"}, holder{Namespace: "ns", Pod: "a", Container: "main"}, nil},
		{"mem", []string{"m-02", "m-01"}, holder{Namespace: "ns", Pod: "b", Container: "main"}, nil},
		{"mem", []string{"m-03", "m-04"}, holder{Namespace: "ns", Pod: "a", Init: true}, nil},
		{"mem", []string{"m-01", "m-03"}, holder{}, errNotHeld},
		{"core", []string{"m-01", "m-02"}, holder{}, errNotHeld},
		{"mem", []string{"m-09"}, holder{}, errNotHeld},
	} {
		got, err := l.find(c.resource, c.ids)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("find(%s, %v) = %+v, %v; want %+v, %v", c.resource, c.ids, got, err, c.want, c.err)
		}
	}
}
