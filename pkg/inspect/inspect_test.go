package inspect

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/resource"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// golden compares got with testdata/name.golden (-update rewrites it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want,+got); run go test ./pkg/inspect -update to accept:\n%s", path, diff)
	}
}

func TestViews(t *testing.T) {
	c, pods := fixture(t)
	cases := map[string]func(*bytes.Buffer) error{
		"table":          func(b *bytes.Buffer) error { return WriteTable(b, c, TableOptions{Unit: GiB}) },
		"table-wide-mib": func(b *bytes.Buffer) error { return WriteTable(b, c, TableOptions{Unit: MiB, Wide: true}) },
		"details":        func(b *bytes.Buffer) error { return WriteDetails(b, c, GiB, now) },
		"pod-multi": func(b *bytes.Buffer) error {
			return WritePod(b, BuildPod(c, podInput(t, pods["default/multi"], nil)), GiB)
		},
		"pod-pending": func(b *bytes.Buffer) error {
			ev := corev1.Event{Reason: "FailedScheduling", LastTimestamp: metav1.NewTime(now),
				Message: "0/3 nodes are available: 3 InsufficientGPUMemory; largest free share on any GPU is 143771 MiB, pod needs 204800 MiB."}
			old := corev1.Event{Reason: "FailedScheduling", LastTimestamp: metav1.NewTime(now.Add(-time.Minute)), Message: "older"}
			return WritePod(b, BuildPod(c, podInput(t, pods["default/pending"], []corev1.Event{ev, old})), GiB)
		},
		"pod-refused": func(b *bytes.Buffer) error {
			return WritePod(b, BuildPod(c, podInput(t, pods["default/liar"], nil)), MiB)
		},
	}
	for name, write := range cases {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := write(&b); err != nil {
				t.Fatal(err)
			}
			golden(t, name, b.Bytes())
		})
	}
}

// TestBookings checks the numbers behind the views, worked out by hand.
func TestBookings(t *testing.T) {
	c, _ := fixture(t)
	type gpu struct{ mib, compute int64 }
	want := map[string][]gpu{
		// multi: app containers run together, 20480+4096 = 24576 MiB
		// and 50+10 = 60%; the init container's 8192 MiB runs alone
		// first and fits inside. liar: the 40960 MiB its record names,
		// though it asks 1024 (booked as it stands). small: 3072 MiB
		// and no compute (a memory-only request books memory only).
		"a-mixed": {{24576 + 40960, 60}, {3072, 0}, {0, 0}},
		// whole: all of GPU 0.
		"b-whole": {{81559, 100}, {0, 0}},
		// pair: 20000 MiB over 2 GPUs, 10000 each.
		"c-h200": {{10000, 0}, {10000, 0}, {0, 0}, {0, 0}},
	}
	got := map[string][]gpu{}
	for _, n := range c.Nodes {
		if n.Error != "" {
			continue
		}
		for _, g := range n.GPUs {
			got[n.Name] = append(got[n.Name], gpu{g.BookedMemoryMiB, g.BookedCompute})
		}
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(gpu{})); diff != "" {
		t.Errorf("bookings (-want,+got):\n%s", diff)
	}
	// 24576+40960+3072 + 81559 + 20000 = 170167 of
	// 81920+2*15360 + 2*81559 + 4*143771 = 850842.
	if c.AllocatedMiB != 170167 || c.TotalMiB != 850842 {
		t.Errorf("cluster %d/%d MiB; want 170167/850842", c.AllocatedMiB, c.TotalMiB)
	}
	if len(c.Refused) != 1 || c.Refused[0].Pod != "default/bad" {
		t.Errorf("refused %+v; want default/bad alone", c.Refused)
	}
	if len(c.Unconforming) != 1 || c.Unconforming[0].Pod != "default/liar" {
		t.Errorf("unconforming %+v; want default/liar", c.Unconforming)
	}
}

func podInput(t *testing.T, p *corev1.Pod, events []corev1.Event) PodInput {
	t.Helper()
	req, err := model(t).PodRequest(p)
	return PodInput{Pod: p, Events: events, Request: req, RequestErr: err}
}

func model(t *testing.T) *resource.Model {
	t.Helper()
	m, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fixture is a cluster with GPUs of mixed sizes and models on one node, a
// whole-card node, an unhealthy GPU, fresh and stale usage, a node whose
// inventory is garbage, multi-GPU and multi-container pods with an init
// container, and records gpushare refuses.
func fixture(t *testing.T) (*Cluster, map[string]*corev1.Pod) {
	t.Helper()
	a100 := gpusharev1.GPU{Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true}
	t4 := gpusharev1.GPU{Model: "Tesla T4", MemoryMiB: 15360, Healthy: true}
	sick := t4
	sick.Healthy = false
	h100 := gpusharev1.GPU{Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true}
	h200 := gpusharev1.GPU{Model: "NVIDIA H200", MemoryMiB: 143771, Healthy: true}
	invs := map[string]*gpusharev1.GPUInventory{
		"a-mixed": inventory("a-mixed", gpusharev1.ModeShared, a100, t4, sick),
		"b-whole": inventory("b-whole", gpusharev1.ModeWholeCard, h100, h100),
		"c-h200":  inventory("c-h200", gpusharev1.ModeShared, h200, h200, h200, h200),
	}
	// HAMi-core holds c-h200's shared containers.
	invs["c-h200"].Enforcement = gpusharev1.EnforcementHAMiCore
	nodes := []corev1.Node{
		node(t, "a-mixed", "10.0.0.1", invs["a-mixed"], usage(t, now.Add(-30*time.Second), 30000, 1000, 0)),
		node(t, "b-whole", "10.0.0.2", invs["b-whole"], usage(t, now.Add(-10*time.Minute), 70000, 0)),
		node(t, "c-h200", "10.0.0.3", invs["c-h200"], ""),
		node(t, "d-broken", "10.0.0.4", nil, ""),
		{ObjectMeta: metav1.ObjectMeta{Name: "e-plain"}},
	}
	m := model(t)
	pods := map[string]*corev1.Pod{}
	add := func(p *corev1.Pod, node string, gpus ...[]int) {
		if node != "" {
			p.Spec.NodeName = node
			p.Status.Phase = corev1.PodRunning
			p.Annotations = map[string]string{gpusharev1.AllocationAnnotation: recordFor(t, m, p, invs[node], gpus)}
		}
		pods[p.Namespace+"/"+p.Name] = p
	}
	add(pod("default", "multi").init("warm-cache", "8192", "").app("server", "20480", "50").app("tokenizer", "4096", "10").obj(), "a-mixed", []int{0}, []int{0}, []int{0})
	add(pod("default", "small").app("main", "3072", "").obj(), "a-mixed", []int{1})
	add(pod("ml", "whole").count("main", "1").obj(), "b-whole", []int{0})
	add(pod("ml", "pair").countMem("main", "2", "20000").obj(), "c-h200", []int{0, 1})
	add(pod("default", "liar").app("main", "1024", "").obj(), "a-mixed", []int{1})
	add(pod("default", "ended").app("main", "1024", "").obj(), "a-mixed", []int{1})
	pods["default/ended"].Status.Phase = corev1.PodSucceeded
	add(pod("default", "bad").app("main", "1024", "").obj(), "a-mixed", []int{1})
	pods["default/bad"].Annotations[gpusharev1.AllocationAnnotation] = `{"apiVersion":"gpushare.io/v1alpha1","kind":"Allocation",`
	add(pod("default", "pending").app("main", "204800", "").obj(), "")
	pods["default/pending"].Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/3 nodes are available: 3 InsufficientGPUMemory; largest free share on any GPU is 143771 MiB, pod needs 204800 MiB."}}}
	// The liar's record books 40960 MiB; its spec asks for 1024.
	liar := pods["default/liar"]
	liar.Annotations[gpusharev1.AllocationAnnotation] = mustMarshal(t, &gpusharev1.Allocation{Node: "a-mixed",
		Containers: []gpusharev1.ContainerAllocation{{Name: "main", Kind: gpusharev1.ContainerApp,
			GPUs: []gpusharev1.GPUShare{{Index: 0, UUID: "GPU-a-mixed-0", MemoryMiB: 40960}}}}})
	var list []corev1.Pod
	for _, p := range pods {
		list = append(list, *p)
	}
	c := Build(Input{Nodes: nodes, Pods: list, Now: now, Requests: m.PodRequest, SetLargestGPU: m.SetLargestGPU})
	return c, pods
}

func inventory(name string, mode gpusharev1.Mode, gpus ...gpusharev1.GPU) *gpusharev1.GPUInventory {
	inv := &gpusharev1.GPUInventory{Mode: mode}
	for i, g := range gpus {
		g.Index, g.UUID, g.NUMANode = i, name+"-"+string(rune('0'+i)), 0
		g.UUID = "GPU-" + g.UUID
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv
}

func node(t *testing.T, name, ip string, inv *gpusharev1.GPUInventory, usage string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{gpusharev1.NodeLabel: "true"},
		Annotations: map[string]string{gpusharev1.InventoryAnnotation: "{not json"}}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}
	if inv != nil {
		n.Annotations[gpusharev1.InventoryAnnotation] = mustMarshal(t, inv)
	}
	if usage != "" {
		n.Annotations[gpusharev1.UsageAnnotation] = usage
	}
	return n
}

func usage(t *testing.T, at time.Time, used ...int64) string {
	u := &gpusharev1.GPUUsage{Time: metav1.NewTime(at)}
	for i, mib := range used {
		u.GPUs = append(u.GPUs, gpusharev1.GPULoad{Index: i, UsedMemoryMiB: mib, UtilizationPercent: int64(10 * (i + 4))})
	}
	return mustMarshal(t, u)
}

// recordFor books, for each GPU container of p in order, the GPUs given, as
// the scheduler would: the container's per-GPU demand, or the whole GPU.
func recordFor(t *testing.T, m *resource.Model, p *corev1.Pod, inv *gpusharev1.GPUInventory, gpus [][]int) string {
	t.Helper()
	req, err := m.PodRequest(p)
	if err != nil {
		t.Fatal(err)
	}
	a := &gpusharev1.Allocation{Node: p.Spec.NodeName}
	kinds := map[string]gpusharev1.ContainerKind{"app": gpusharev1.ContainerApp, "init": gpusharev1.ContainerInit, "sidecar": gpusharev1.ContainerSidecar}
	for i, c := range req.Containers {
		d := c.PerGPU()
		ca := gpusharev1.ContainerAllocation{Name: c.Name, Kind: kinds[c.Kind.String()]}
		for _, g := range gpus[i] {
			share := gpusharev1.GPUShare{Index: g, UUID: inv.GPUs[g].UUID, MemoryMiB: d.MemoryMiB, Compute: d.Compute}
			if d.Exclusive {
				share.MemoryMiB, share.Compute = inv.GPUs[g].MemoryMiB, 100
			}
			ca.GPUs = append(ca.GPUs, share)
		}
		a.Containers = append(a.Containers, ca)
	}
	return mustMarshal(t, a)
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	s, err := gpusharev1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// podBuilder builds test pods: pod("ns", "p").app("c", "4096", "30").obj().
type podBuilder struct{ p corev1.Pod }

func pod(ns, name string) *podBuilder {
	return &podBuilder{p: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name),
		CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}, Spec: corev1.PodSpec{SchedulerName: "gpushare-scheduler"}}}
}

func limits(kv ...string) corev1.ResourceRequirements {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			l[corev1.ResourceName(kv[i])] = k8sresource.MustParse(kv[i+1])
		}
	}
	return corev1.ResourceRequirements{Limits: l}
}

func (b *podBuilder) app(name, mib, core string) *podBuilder {
	b.p.Spec.Containers = append(b.p.Spec.Containers, corev1.Container{Name: name,
		Resources: limits("gpushare.io/gpu-mem", mib, "gpushare.io/gpu-core", core)})
	return b
}

func (b *podBuilder) init(name, mib, core string) *podBuilder {
	b.p.Spec.InitContainers = append(b.p.Spec.InitContainers, corev1.Container{Name: name,
		Resources: limits("gpushare.io/gpu-mem", mib, "gpushare.io/gpu-core", core)})
	return b
}

func (b *podBuilder) count(name, n string) *podBuilder {
	b.p.Spec.Containers = append(b.p.Spec.Containers, corev1.Container{Name: name, Resources: limits("gpushare.io/gpu-count", n)})
	return b
}

func (b *podBuilder) countMem(name, n, mib string) *podBuilder {
	b.p.Spec.Containers = append(b.p.Spec.Containers, corev1.Container{Name: name,
		Resources: limits("gpushare.io/gpu-count", n, "gpushare.io/gpu-mem", mib)})
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return &b.p }

// TestAliyunPlaced: a pod the Aliyun system placed (its annotations, no
// gpushare record) is shown where the scheduler books it, 3 GiB = 3072 MiB
// on GPU 1; without a resource model to read its request by, it is listed
// as a record gpushare books nothing for, not hidden.
func TestAliyunPlaced(t *testing.T) {
	t4 := gpusharev1.GPU{Model: "Tesla T4", MemoryMiB: 15360, Healthy: true}
	inv := inventory("t4", gpusharev1.ModeShared, t4, t4)
	nodes := []corev1.Node{node(t, "t4", "10.0.0.9", inv, "")}
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old", UID: "old",
		Annotations: map[string]string{"ALIYUN_COM_GPU_MEM_IDX": "1", "ALIYUN_COM_GPU_MEM_POD": "3"}},
		Spec: corev1.PodSpec{NodeName: "t4", Containers: []corev1.Container{{Name: "main",
			Resources: limits("aliyun.com/gpu-mem", "3")}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	m := model(t)

	c := Build(Input{Nodes: nodes, Pods: []corev1.Pod{p}, Now: now, Requests: m.PodRequest, SetLargestGPU: m.SetLargestGPU})
	if len(c.Refused) != 0 || len(c.Nodes) != 1 {
		t.Fatalf("nodes %d, refused %+v; want the node and nothing refused", len(c.Nodes), c.Refused)
	}
	if g := c.Nodes[0].GPUs; g[1].BookedMemoryMiB != 3072 || g[0].BookedMemoryMiB != 0 {
		t.Errorf("booked %d and %d MiB on GPUs 0 and 1; want 0 and 3072", g[0].BookedMemoryMiB, g[1].BookedMemoryMiB)
	}

	c = Build(Input{Nodes: nodes, Pods: []corev1.Pod{p}, Now: now})
	if len(c.Refused) != 1 || c.Refused[0].Pod != "default/old" {
		t.Errorf("without a resource model: refused %+v; want default/old listed", c.Refused)
	}
}

// TestAliyunOverCommitted: two pods the Aliyun system placed on one GPU
// past its memory are both shown holding it, and the one booked second
// is listed as a record that over-commits its GPU, held full, not as one
// gpushare books nothing for; the pod view says the same.
func TestAliyunOverCommitted(t *testing.T) {
	t4 := gpusharev1.GPU{Model: "Tesla T4", MemoryMiB: 15360, Healthy: true}
	inv := inventory("t4", gpusharev1.ModeShared, t4, t4)
	nodes := []corev1.Node{node(t, "t4", "10.0.0.9", inv, "")}
	aliyun := func(name string, gib string, at int64) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name),
			CreationTimestamp: metav1.Unix(at, 0),
			Annotations:       map[string]string{"ALIYUN_COM_GPU_MEM_IDX": "0", "ALIYUN_COM_GPU_MEM_POD": gib}},
			Spec: corev1.PodSpec{NodeName: "t4", Containers: []corev1.Container{{Name: "main",
				Resources: limits("aliyun.com/gpu-mem", gib)}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	pods := []corev1.Pod{aliyun("first", "10", 1), aliyun("second", "8", 2)}
	m := model(t)
	c := Build(Input{Nodes: nodes, Pods: pods, Now: now, Requests: m.PodRequest, SetLargestGPU: m.SetLargestGPU})
	if len(c.Refused) != 0 {
		t.Errorf("refused %+v; want none: both records are held", c.Refused)
	}
	if len(c.OverCommitted) != 1 || c.OverCommitted[0].Pod != "default/second" ||
		!strings.Contains(c.OverCommitted[0].Error, "over-commits its GPU") || !strings.Contains(c.OverCommitted[0].Error, "holds them full") {
		t.Errorf("over-committed %+v; want default/second, held full", c.OverCommitted)
	}
	if got := c.Nodes[0].GPUs[0].BookedMemoryMiB; got != 18*1024 {
		t.Errorf("GPU 0 books %d MiB; want both pods' 18432", got)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, c, TableOptions{Unit: MiB}); err != nil {
		t.Fatal(err)
	}
	if out := table.String(); strings.Contains(out, "books nothing") || !strings.Contains(out, "Records that over-commit their GPUs") {
		t.Errorf("table:\n%s\nwant the pod under the over-commit heading alone", out)
	}
}

// TestClaimHolders: a ResourceClaim allocated a share of gpushare's DRA
// device is listed among the GPU's holders, under the pod it is reserved
// for, and counted in what the GPU books, beside the pods' records; one
// of another driver is not.
func TestClaimHolders(t *testing.T) {
	t4 := gpusharev1.GPU{Model: "Tesla T4", MemoryMiB: 15360, Healthy: true}
	nodes := []corev1.Node{node(t, "t4", "10.0.0.9", inventory("t4", gpusharev1.ModeShared, t4, t4), "")}
	rc := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "infer-gpu", UID: "c1"}}
	rc.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: "gpu.gpushare.io", Pool: "t4", Device: "gpu-1",
		ConsumedCapacity: map[resourceapi.QualifiedName]k8sresource.Quantity{"memory": k8sresource.MustParse("3Gi")},
	}}}}
	rc.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "infer", UID: "p1"}}
	other := *rc.DeepCopy()
	other.UID, other.Name = "c2", "nic"
	other.Status.Allocation.Devices.Results[0].Driver = "nic.example.com"

	c := Build(Input{Nodes: nodes, Claims: []resourceapi.ResourceClaim{rc, other}, Now: now})
	g := c.Nodes[0].GPUs
	if g[1].BookedMemoryMiB != 3072 || g[0].BookedMemoryMiB != 0 || c.AllocatedMiB != 3072 {
		t.Errorf("booked %d and %d MiB (cluster %d); want the claim's 3072 on GPU 1", g[0].BookedMemoryMiB, g[1].BookedMemoryMiB, c.AllocatedMiB)
	}
	want := []Holder{{Pod: "ml/infer", Container: "claim/infer-gpu", Kind: "Claim", MemoryMiB: 3072, Enforced: "none"}}
	if !cmp.Equal(g[1].Holders, want) || len(g[0].Holders) != 0 {
		t.Errorf("holders %+v and %+v; want none, then %+v", g[0].Holders, g[1].Holders, want)
	}
	// The pod's view says it asks through its claims, not that it asks
	// no GPU.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "infer", UID: "p1"}, Spec: corev1.PodSpec{NodeName: "t4",
		Containers: []corev1.Container{{Name: "main"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	var out bytes.Buffer
	if err := WritePod(&out, BuildPod(c, podInput(t, p, nil)), GiB); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "Asks:       GPUs through ResourceClaims") || strings.Contains(s, "no GPU") {
		t.Errorf("pod view:\n%s\nwant it to ask through its claims", s)
	}
}

// TestClaimOverCommitted: a claim allocated past what its GPU has left
// beside another is listed under the over-commit heading with its pod,
// as the scheduler sees it before deleting the pod.
func TestClaimOverCommitted(t *testing.T) {
	t4 := gpusharev1.GPU{Model: "Tesla T4", MemoryMiB: 15360, Healthy: true}
	nodes := []corev1.Node{node(t, "t4", "10.0.0.9", inventory("t4", gpusharev1.ModeShared, t4, t4), "")}
	claim := func(name, uid, gib string) resourceapi.ResourceClaim {
		rc := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(uid)}}
		rc.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: "gpu.gpushare.io", Pool: "t4", Device: "gpu-0",
			ConsumedCapacity: map[resourceapi.QualifiedName]k8sresource.Quantity{"memory": k8sresource.MustParse(gib)},
		}}}}
		rc.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: types.UID(uid + "-pod")}}
		return rc
	}
	c := Build(Input{Nodes: nodes, Claims: []resourceapi.ResourceClaim{claim("a", "c1", "10Gi"), claim("b", "c2", "8Gi")}, Now: now})
	if len(c.OverCommitted) != 2 || !strings.Contains(c.OverCommitted[0].Pod, "ResourceClaim ml/a (pod a)") ||
		!strings.Contains(c.OverCommitted[1].Error, "books GPU 0, whose pods and claims book more than it has") {
		t.Errorf("over-committed %+v; want both claims of GPU 0", c.OverCommitted)
	}
	if c = Build(Input{Nodes: nodes, Claims: []resourceapi.ResourceClaim{claim("a", "c1", "10Gi")}, Now: now}); len(c.OverCommitted) != 0 {
		t.Errorf("over-committed %+v with one claim that fits", c.OverCommitted)
	}
	// A record that came after the claim, not started: both listed,
	// whichever this view booked first; a pod running there before
	// them is not.
	m := model(t)
	inv := inventory("t4", gpusharev1.ModeShared, t4, t4)
	late := pod("ml", "late").app("main", "8192", "").obj()
	late.Spec.NodeName, late.Status.Phase = "t4", corev1.PodPending
	late.Annotations = map[string]string{gpusharev1.AllocationAnnotation: recordFor(t, m, late, inv, [][]int{{0}})}
	early := pod("ml", "early").app("main", "1024", "").obj()
	early.Spec.NodeName, early.Status.Phase = "t4", corev1.PodRunning
	early.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	early.Annotations = map[string]string{gpusharev1.AllocationAnnotation: recordFor(t, m, early, inv, [][]int{{0}})}
	c = Build(Input{Nodes: nodes, Pods: []corev1.Pod{*early, *late}, Claims: []resourceapi.ResourceClaim{claim("a", "c1", "10Gi")}, Now: now, Requests: m.PodRequest})
	var names []string
	for _, r := range c.OverCommitted {
		names = append(names, r.Pod)
	}
	if want := []string{"ResourceClaim ml/a (pod a)", "ml/late"}; !slices.Equal(names, want) {
		t.Errorf("over-committed %v; want %v", names, want)
	}
}

// TestEnforcedHolders: each holder says what holds it to its share on
// its node: an MPS client MPS whatever the node says, a shared container
// the node's enforcement, a whole GPU nothing.
func TestEnforcedHolders(t *testing.T) {
	m := model(t)
	gpu := gpusharev1.GPU{Model: "Tesla T4", MemoryMiB: 15360, Healthy: true, MPS: true}
	for _, e := range []gpusharev1.Enforcement{"", gpusharev1.EnforcementMPS, gpusharev1.EnforcementHAMiCore} {
		inv := inventory("n", gpusharev1.ModeShared, gpu, gpu, gpu)
		inv.Enforcement = e
		mps := pod("default", "mps").obj()
		mps.Spec.Containers = []corev1.Container{{Name: "main", Resources: limits("keti.com/mpsgpu", "1")}}
		var list []corev1.Pod
		for _, p := range []struct {
			pod  *corev1.Pod
			gpus []int
		}{{mps, []int{0}}, {pod("default", "share").app("main", "1024", "").obj(), []int{1}}, {pod("default", "whole").count("main", "1").obj(), []int{2}}} {
			p.pod.Spec.NodeName, p.pod.Status.Phase = "n", corev1.PodRunning
			p.pod.Annotations = map[string]string{gpusharev1.AllocationAnnotation: recordFor(t, m, p.pod, inv, [][]int{p.gpus})}
			list = append(list, *p.pod)
		}
		c := Build(Input{Nodes: []corev1.Node{node(t, "n", "10.0.0.1", inv, "")}, Pods: list, Now: now, Requests: m.PodRequest})
		if len(c.Refused) > 0 {
			t.Fatalf("refused %+v", c.Refused)
		}
		shared := string(gpusharev1.EnforcementNone)
		if e != "" {
			shared = string(e)
		}
		for i, want := range []string{"mps", shared, "whole"} {
			if h := c.Nodes[0].GPUs[i].Holders; len(h) != 1 || h[0].Enforced != want {
				t.Errorf("enforcement %q: GPU %d holders %+v, want one held by %s", e, i, h, want)
			}
		}
		if c.Nodes[0].Enforcement != shared {
			t.Errorf("node enforcement %q, want %q", c.Nodes[0].Enforcement, shared)
		}
	}
}
