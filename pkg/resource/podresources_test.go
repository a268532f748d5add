package resource

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
)

// The effective CPU and memory came from a hand-written sum before they
// came from k8s.io/component-helpers; referenceCPUMemory is that sum, kept
// to prove the two agree.
func referenceCPUMemory(spec *corev1.PodSpec) (cpuMilli, memoryMiB int64) {
	type amount struct{ milli, bytes int64 }
	add := func(a, b amount) amount { return amount{a.milli + b.milli, a.bytes + b.bytes} }
	maxOf := func(a, b amount) amount { return amount{max(a.milli, b.milli), max(a.bytes, b.bytes)} }
	get := func(r *corev1.ResourceRequirements, name corev1.ResourceName) (k8sresource.Quantity, bool) {
		if q, ok := r.Requests[name]; ok {
			return q, true
		}
		q, ok := r.Limits[name]
		return q, ok
	}
	of := func(r *corev1.ResourceRequirements) amount {
		var out amount
		if q, ok := get(r, corev1.ResourceCPU); ok {
			out.milli = q.MilliValue()
		}
		if q, ok := get(r, corev1.ResourceMemory); ok {
			out.bytes = q.Value()
		}
		return out
	}
	var apps, sidecars, inits amount
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		r := of(&c.Resources)
		if isSidecar(c) {
			apps = add(apps, r)
			sidecars = add(sidecars, r)
			inits = maxOf(inits, sidecars)
			continue
		}
		inits = maxOf(inits, add(r, sidecars))
	}
	for i := range spec.Containers {
		apps = add(apps, of(&spec.Containers[i].Resources))
	}
	total := maxOf(apps, inits)
	if spec.Resources != nil {
		pod := of(spec.Resources)
		if _, ok := get(spec.Resources, corev1.ResourceCPU); ok {
			total.milli = pod.milli
		}
		if _, ok := get(spec.Resources, corev1.ResourceMemory); ok {
			total.bytes = pod.bytes
		}
	}
	if q, ok := spec.Overhead[corev1.ResourceCPU]; ok {
		total.milli += q.MilliValue()
	}
	if q, ok := spec.Overhead[corev1.ResourceMemory]; ok {
		total.bytes += q.Value()
	}
	const mib = 1 << 20
	return total.milli, (total.bytes + mib - 1) / mib
}

func TestEffectiveCPUMemory(t *testing.T) {
	both := func(r corev1.ResourceRequirements, lim corev1.ResourceList) corev1.ResourceRequirements {
		r.Limits = lim
		return r
	}
	cases := map[string]struct {
		pod          *corev1.Pod
		milli, mebis int64
	}{
		"no requests": {pod: makePod("p").app("c", reqs()).obj()},
		"app containers sum": {
			pod:   makePod("p").app("a", reqs("cpu", "100m", "memory", "64Mi")).app("b", reqs("cpu", "1", "memory", "1Gi")).obj(),
			milli: 1100, mebis: 1088,
		},
		"a limit stands in for a missing request": {
			pod:   makePod("p").app("a", limits("cpu", "2", "memory", "1Gi")).app("b", both(reqs("cpu", "500m"), list("cpu", "1", "memory", "256Mi"))).obj(),
			milli: 2500, mebis: 1280,
		},
		"a larger init container wins": {
			pod:   makePod("p").initContainer("i", reqs("cpu", "3", "memory", "10Mi")).app("a", reqs("cpu", "1", "memory", "20Mi")).obj(),
			milli: 3000, mebis: 20,
		},
		"init containers take the largest, not the sum": {
			pod: makePod("p").initContainer("i1", reqs("cpu", "2")).initContainer("i2", reqs("cpu", "3")).
				app("a", reqs("cpu", "1")).obj(),
			milli: 3000,
		},
		"sidecars add to app containers": {
			pod:   makePod("p").sidecar("s", reqs("cpu", "500m", "memory", "100Mi")).app("a", reqs("cpu", "500m", "memory", "1500Mi")).obj(),
			milli: 1000, mebis: 1600,
		},
		"a sidecar counts towards the init containers after it only": {
			pod: makePod("p").initContainer("before", reqs("cpu", "2")).sidecar("s", reqs("cpu", "1")).
				initContainer("after", reqs("cpu", "2")).app("a", reqs("cpu", "100m")).obj(),
			milli: 3000,
		},
		"overhead is added": {
			pod:   makePod("p").app("a", reqs("cpu", "1", "memory", "1Gi")).overhead("cpu", "250m", "memory", "120Mi").obj(),
			milli: 1250, mebis: 1144,
		},
		"overhead is added to the init containers' maximum": {
			pod:   makePod("p").initContainer("i", reqs("cpu", "4")).app("a", reqs("cpu", "1")).overhead("cpu", "100m").obj(),
			milli: 4100,
		},
		"pod-level requests replace the containers'": {
			pod:   makePod("p").app("a", reqs("cpu", "1", "memory", "1Gi")).podRequests("cpu", "2", "memory", "2Gi").obj(),
			milli: 2000, mebis: 2048,
		},
		"a pod-level request replaces its resource only": {
			pod:   makePod("p").app("a", reqs("cpu", "1", "memory", "1Gi")).podRequests("cpu", "2").overhead("memory", "1Mi").obj(),
			milli: 2000, mebis: 1025,
		},
		"memory rounds up to a MiB": {
			pod:   makePod("p").app("a", reqs("memory", "1")).obj(),
			mebis: 1,
		},
		"sub-milli CPU rounds up per container": {
			pod:   makePod("p").app("a", reqs("cpu", "0.0001")).app("b", reqs("cpu", "0.0001")).obj(),
			milli: 2,
		},
		"GPU resources are not counted": {
			pod:   makePod("p").app("a", limits("aliyun.com/gpu-mem", "4", "nvidia.com/gpu", "1", "cpu", "1")).obj(),
			milli: 1000,
		},
	}
	pod := func(spec corev1.PodSpec) *corev1.Pod { return &corev1.Pod{Spec: spec} }
	// A pod-level limit stands in for a missing pod-level request too.
	lim := makePod("p").app("a", reqs("cpu", "1")).obj().Spec
	lim.Resources = &corev1.ResourceRequirements{Limits: list("cpu", "3")}
	cases["a pod-level limit stands in for a missing pod-level request"] = struct {
		pod          *corev1.Pod
		milli, mebis int64
	}{pod: pod(lim), milli: 3000}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			milli, mebis := effectiveCPUMemory(&tc.pod.Spec)
			if milli != tc.milli || mebis != tc.mebis {
				t.Errorf("effectiveCPUMemory() = %dm, %dMi, want %dm, %dMi", milli, mebis, tc.milli, tc.mebis)
			}
			refMilli, refMebis := referenceCPUMemory(&tc.pod.Spec)
			if milli != refMilli || mebis != refMebis {
				t.Errorf("effectiveCPUMemory() = %dm, %dMi, the hand-written sum %dm, %dMi", milli, mebis, refMilli, refMebis)
			}
		})
	}
}

// TestEffectiveCPUMemoryMatchesReference compares the two on random pods
// mixing init, sidecar and app containers, limits, overhead and pod-level
// requests, and also PodRequests's sum on each, and the containers' sum
// where it applies (plain pods among them).
func TestEffectiveCPUMemoryMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cpus := []string{"", "0", "1m", "0.0004", "100m", "250m", "1", "1.5", "4"}
	mems := []string{"", "0", "1", "1k", "1Mi", "100M", "256Mi", "1Gi", "1.5Gi"}
	resources := func() corev1.ResourceRequirements {
		var rr corev1.ResourceRequirements
		for _, set := range []*corev1.ResourceList{&rr.Requests, &rr.Limits} {
			l := corev1.ResourceList{}
			if c := cpus[r.IntN(len(cpus))]; c != "" {
				l[corev1.ResourceCPU] = k8sresource.MustParse(c)
			}
			if m := mems[r.IntN(len(mems))]; m != "" {
				l[corev1.ResourceMemory] = k8sresource.MustParse(m)
			}
			if r.IntN(4) == 0 {
				l["aliyun.com/gpu-mem"] = k8sresource.MustParse("8")
			}
			if len(l) > 0 && r.IntN(3) > 0 {
				*set = l
			}
		}
		return rr
	}
	summed := 0
	for i := range 2000 {
		b := makePod(fmt.Sprint(i))
		for j := range r.IntN(4) - r.IntN(2) {
			if r.IntN(2) == 0 {
				b.sidecar(fmt.Sprint("s", j), resources())
			} else {
				b.initContainer(fmt.Sprint("i", j), resources())
			}
		}
		for j := range 1 + r.IntN(3) {
			b.app(fmt.Sprint("a", j), resources())
		}
		spec := &b.obj().Spec
		if r.IntN(3) == 0 {
			spec.Overhead = resources().Requests
		}
		if r.IntN(3) == 0 {
			rr := resources()
			spec.Resources = &rr
		}
		milli, mebis := effectiveCPUMemory(spec)
		refMilli, refMebis := referenceCPUMemory(spec)
		// Both ways to the sum: the containers' alone where it applies,
		// PodRequests for any pod.
		if m, mi := podRequestsCPUMemory(spec); m != milli || mi != mebis {
			t.Fatalf("pod %d: PodRequests gives %dm, %dMi, effectiveCPUMemory %dm, %dMi", i, m, mi, milli, mebis)
		}
		if _, _, ok := containersCPUMemory(spec); ok {
			summed++
		}
		if milli != refMilli || mebis != refMebis {
			var desc []string
			for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
				desc = append(desc, fmt.Sprintf("%s(sidecar=%t) requests %v limits %v", c.Name, isSidecar(&c), c.Resources.Requests, c.Resources.Limits))
			}
			t.Fatalf("pod %d: effectiveCPUMemory() = %dm, %dMi, the hand-written sum %dm, %dMi\ncontainers: %s\noverhead: %v\npod resources: %v",
				i, milli, mebis, refMilli, refMebis, strings.Join(desc, "; "), spec.Overhead, spec.Resources)
		}
	}
	if summed < 100 {
		t.Errorf("only %d of 2000 pods summed their containers alone", summed)
	}
}
