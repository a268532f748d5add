package record_test

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/record"
)

// asks is a resource model for the tests: each container asks the MiB
// of its gpushare.io/gpu-mem limit, or the GiB of its aliyun.com/gpu-mem;
// annotation "mib", where set, overrides it (a request-shaping
// annotation).
func asks(pod *corev1.Pod) (*alloc.PodRequest, error) {
	req := &alloc.PodRequest{Key: pod.Namespace + "/" + pod.Name}
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits["gpushare.io/gpu-mem"]
		mib := q.Value()
		if gib, aliyun := c.Resources.Limits[record.AliyunMemory]; aliyun {
			ok, mib = true, gib.Value()*1024
		}
		if !ok {
			continue
		}
		if v, ok := pod.Annotations["mib"]; ok {
			n, err := k8sresource.ParseQuantity(v)
			if err != nil {
				return nil, err
			}
			mib = n.Value()
		}
		req.Containers = append(req.Containers, alloc.PodContainer{Kind: alloc.App,
			ContainerRequest: alloc.ContainerRequest{Name: c.Name, Count: 1, MemoryMiB: mib}})
	}
	return req, nil
}

// TestRead: which records book, and which book though they are not what
// their pods ask. The rules are Reader's doc comment, in order.
func TestRead(t *testing.T) {
	reader := record.Reader{Requests: asks, RequestAnnotations: func(*corev1.Pod) []string { return []string{"mib"} }}
	node := &alloc.Node{Name: "n1", GPUs: []alloc.GPU{{Index: 0, UUID: "GPU-0", Model: "T4", MemoryMiB: 15360, Healthy: true}}}
	// pod asks asksMiB and carries a record of recordMiB, both as edit
	// changes them; edit returns the record to write (nil for none).
	pod := func(recordMiB, asksMiB int64, edit func(*corev1.Pod, *gpusharev1.Allocation) *gpusharev1.Allocation) *corev1.Pod {
		a := &gpusharev1.Allocation{Node: "n1", Asked: gpusharev1.AskedOf(nil, []string{"mib"}),
			Containers: []gpusharev1.ContainerAllocation{{Name: "main", Kind: gpusharev1.ContainerApp,
				GPUs: []gpusharev1.GPUShare{{Index: 0, UUID: "GPU-0", MemoryMiB: recordMiB}}}}}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Annotations: map[string]string{}},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(asksMiB, k8sresource.DecimalSI)}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if edit != nil {
			a = edit(p, a)
		}
		if a != nil {
			v, err := gpusharev1.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			p.Annotations[gpusharev1.AllocationAnnotation] = v
		}
		return p
	}
	type edit = func(*corev1.Pod, *gpusharev1.Allocation) *gpusharev1.Allocation
	pods := func(f func(*corev1.Pod)) edit {
		return func(p *corev1.Pod, a *gpusharev1.Allocation) *gpusharev1.Allocation { f(p); return a }
	}
	for name, c := range map[string]struct {
		pod *corev1.Pod
		// err: books nothing, with this error; else books mib.
		err     error
		errText string
		mib     int64
		// problem: the node daemon refuses it, with this in the error.
		problem string
	}{
		"as asked":  {pod: pod(1024, 1024, nil), mib: 1024},
		"no record": {pod: pod(1024, 1024, func(*corev1.Pod, *gpusharev1.Allocation) *gpusharev1.Allocation { return nil }), err: record.ErrNoRecord},
		"ended":     {pod: pod(1024, 1024, pods(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })), err: record.ErrEnded},
		"not bound": {pod: pod(1024, 1024, pods(func(p *corev1.Pod) { p.Spec.NodeName = "" })), err: record.ErrNotBound},
		"other node": {pod: pod(1024, 1024, func(_ *corev1.Pod, a *gpusharev1.Allocation) *gpusharev1.Allocation { a.Node = "n2"; return a }),
			errText: "its allocation is for node n2"},
		"unknown GPU": {pod: pod(1024, 1024, func(_ *corev1.Pod, a *gpusharev1.Allocation) *gpusharev1.Allocation {
			a.Containers[0].GPUs[0].UUID = "GPU-9"
			return a
		}), errText: "no GPU with UUID GPU-9"},
		// Book what they name; the node daemon refuses them.
		"more than asked": {pod: pod(4096, 1024, nil), mib: 4096, problem: "the container asks for 1024 MiB"},
		"edited": {pod: pod(1024, 1024, pods(func(p *corev1.Pod) { p.Annotations["mib"] = "2048" })),
			mib: 1024, problem: "mib; recreate the pod"},
		"unreadable request": {pod: pod(1024, 1024, func(p *corev1.Pod, a *gpusharev1.Allocation) *gpusharev1.Allocation {
			p.Annotations["mib"] = "lots" // a record from before Asked: read as the pod is
			a.Asked = nil
			return a
		}), mib: 1024, problem: "the pod's own request"},
		// Another system's record: what the pod asks, on the GPU it names.
		"aliyun": {pod: pod(0, 0, func(p *corev1.Pod, _ *gpusharev1.Allocation) *gpusharev1.Allocation {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{record.AliyunMemory: *k8sresource.NewQuantity(2, k8sresource.DecimalSI)}
			p.Annotations[record.AliyunIndex] = "0"
			return nil
		}), mib: 2048},
		"aliyun, no such GPU": {pod: pod(0, 0, func(p *corev1.Pod, _ *gpusharev1.Allocation) *gpusharev1.Allocation {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{record.AliyunMemory: *k8sresource.NewQuantity(2, k8sresource.DecimalSI)}
			p.Annotations[record.AliyunIndex] = "3"
			return nil
		}), err: record.ErrAliyunRecord, errText: "has no GPU 3"},
	} {
		b, err := reader.Book(c.pod, node)
		switch {
		case c.err != nil || c.errText != "":
			if err == nil || (c.err != nil && !errors.Is(err, c.err)) || !strings.Contains(err.Error(), c.errText) {
				t.Errorf("%s: %v, want an error %v %q", name, err, c.err, c.errText)
			}
			continue
		case err != nil:
			t.Errorf("%s: %v, want it booked", name, err)
			continue
		}
		if got := b.Placement.Booked; len(got) != 1 || got[0].MemoryMiB != c.mib || got[0].UUID != "GPU-0" {
			t.Errorf("%s: books %+v, want %d MiB of GPU-0", name, got, c.mib)
		}
		if p := b.Problem(); (p == nil) != (c.problem == "") || p != nil && !strings.Contains(p.Error(), c.problem) {
			t.Errorf("%s: problem %v, want %q", name, p, c.problem)
		}
	}
}
