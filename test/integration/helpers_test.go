package integration

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/controlplane"
	gpurecord "github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

// createNodes creates the nodes and waits until they are schedulable:
// kwok reports them Ready and the node lifecycle controller lifts the
// not-ready taint the apiserver put on them. Pods applied before that
// would see only the nodes that got there first.
func createNodes(t *testing.T, client kubernetes.Interface, specs ...controlplane.NodeSpec) {
	t.Helper()
	for _, s := range specs {
		if err := controlplane.CreateNode(context.Background(), client, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range specs {
		err := waitFor(60*time.Second, func() (bool, error) {
			n, err := client.CoreV1().Nodes().Get(context.Background(), s.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return len(n.Spec.Taints) == 0, nil
		})
		if err != nil {
			t.Fatalf("node %s did not become schedulable: %v", s.Name, err)
		}
	}
}

// waitFor polls cond every 100 ms until it returns true or timeout.
func waitFor(timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errTimeout
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// boundPods waits until n pods matching selector in ns are bound and
// returns them.
func boundPods(t *testing.T, client kubernetes.Interface, ns, selector string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := waitFor(60*time.Second, func() (bool, error) {
		list, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				pods = append(pods, p)
			}
		}
		return len(pods) >= n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d bound pods %q in %s: %v (have %d)", n, selector, ns, err, len(pods))
	}
	return pods
}

func boundPod(t *testing.T, client kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	return waitPod(t, client, ns, name, "to be bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
}

// waitRunning waits until the pod is Running.
func waitRunning(t *testing.T, client kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	return waitPod(t, client, ns, name, "to run", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
}

// waitPod waits up to a minute until the pod exists and done says so of
// it, and returns it; the test fails, saying what it waited for, if not.
func waitPod(t *testing.T, client kubernetes.Interface, ns, name, what string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := waitFor(60*time.Second, func() (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return done(p), nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s/%s %s: %v", ns, name, what, err)
	}
	return pod
}

// record returns the pod's allocation record; the test fails without one.
func record(t testing.TB, pod *corev1.Pod) *gpusharev1.Allocation {
	t.Helper()
	value, ok := pod.Annotations[gpusharev1.AllocationAnnotation]
	if !ok {
		t.Fatalf("pod %s/%s is bound to %s without an allocation record", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	a, err := gpusharev1.ParseAllocation(value)
	if err != nil {
		t.Fatalf("pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	if a.Node != pod.Spec.NodeName {
		t.Fatalf("pod %s/%s is bound to %s but recorded on %s", pod.Namespace, pod.Name, pod.Spec.NodeName, a.Node)
	}
	return a
}

// checkNoOvercommit recomputes every GPU's bookings from the pod records
// and fails if any exceeds its capacity. It returns how many pods hold
// GPUs and the GPU memory they book in all.
func checkNoOvercommit(t *testing.T, client kubernetes.Interface) (booked int, bookedMiB int64) {
	t.Helper()
	states, booked := recompute(t, client)
	for _, s := range states {
		for _, g := range s.GPUs {
			bookedMiB += g.MemoryMiB
		}
	}
	return booked, bookedMiB
}

// recompute rebuilds every gpushare node's state from the pod records,
// failing the test if a record over-commits a GPU, and returns the states
// and how many pods hold GPUs.
func recompute(t *testing.T, client kubernetes.Interface) (map[string]*alloc.NodeState, int) {
	t.Helper()
	states, booked, err := rebuildFromRecords(client)
	if err != nil {
		t.Fatal(err)
	}
	return states, booked
}

// rebuildFromRecords is recompute returning what it finds wrong: a
// record that over-commits a GPU, names an unknown node or does not
// parse.
func rebuildFromRecords(client kubernetes.Interface) (map[string]*alloc.NodeState, int, error) {
	ctx := context.Background()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	states := map[string]*alloc.NodeState{}
	for i := range nodes.Items {
		n, err := gpurecord.NodeFrom(&nodes.Items[i])
		if err != nil {
			continue
		}
		states[n.Name] = alloc.NewNodeState(n)
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	booked := 0
	for i := range pods.Items {
		pod := &pods.Items[i]
		value, ok := pod.Annotations[gpusharev1.AllocationAnnotation]
		if !ok || gpucache.Ended(pod) {
			continue
		}
		a, err := gpusharev1.ParseAllocation(value)
		if err != nil {
			return nil, 0, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if a.Node != pod.Spec.NodeName {
			return nil, 0, fmt.Errorf("pod %s/%s is bound to %q but recorded on %s", pod.Namespace, pod.Name, pod.Spec.NodeName, a.Node)
		}
		s := states[a.Node]
		if s == nil {
			return nil, 0, fmt.Errorf("pod %s/%s recorded on unknown node %s", pod.Namespace, pod.Name, a.Node)
		}
		p, err := gpurecord.PlacementFrom(a, s.Node)
		if err != nil {
			return nil, 0, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if err := s.Apply(p); err != nil {
			return nil, 0, fmt.Errorf("GPU over-committed by pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		booked++
	}
	return states, booked, nil
}

// recordedPods returns the pods that carry an allocation record, ended or
// not.
func recordedPods(t *testing.T, client kubernetes.Interface) []corev1.Pod {
	t.Helper()
	pods, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if _, ok := p.Annotations[gpusharev1.AllocationAnnotation]; ok {
			out = append(out, p)
		}
	}
	return out
}

// asksForGPU says whether a container of the pod asks for a resource of
// the GPU groups the seeds use.
func asksForGPU(p *corev1.Pod) bool {
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		for name := range c.Resources.Limits {
			for _, group := range []string{"gpushare.io/", "aliyun.com/", "elasticgpu.io/", "keti.com/"} {
				if strings.HasPrefix(string(name), group) {
					return true
				}
			}
		}
	}
	return false
}

// gpuPod returns a pod asking gpushare.io/gpu-mem MiB (and core percent if
// not zero) in one container.
func gpuPod(name string, mib, core int64) *corev1.Pod {
	limits := corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(mib, k8sresource.DecimalSI)}
	if core > 0 {
		limits["gpushare.io/gpu-core"] = *k8sresource.NewQuantity(core, k8sresource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: limits}}}},
	}
}

// mpsPod is a pod asking one GPU under MPS (keti.com/mpsgpu) with mib
// MiB on it (the GPUlimits annotation).
func mpsPod(name string, mib int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{"GPUlimits": fmt.Sprintf("%dMi", mib)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"keti.com/mpsgpu": *k8sresource.NewQuantity(1, k8sresource.DecimalSI)}}}}},
	}
}

// failedSchedulingMessage waits for a FailedScheduling event on the pod
// that contains want, and returns it.
func failedSchedulingMessage(t *testing.T, client kubernetes.Interface, ns, name, want string) string {
	t.Helper()
	return eventNote(t, client, ns, name, "FailedScheduling", want)
}

// eventNote waits for an event of reason on the pod whose note contains
// want, and returns the note.
func eventNote(t *testing.T, client kubernetes.Interface, ns, name, reason, want string) string {
	t.Helper()
	return eventNoteWithin(t, 30*time.Second, client, ns, name, reason, want)
}

// eventNoteWithin is eventNote waiting up to d: a real node's scheduler
// pod, restarted by its probes on a busy machine, needs longer.
func eventNoteWithin(t *testing.T, d time.Duration, client kubernetes.Interface, ns, name, reason, want string) string {
	t.Helper()
	var last string
	var listErr error
	err := waitFor(d, func() (bool, error) {
		evs, err := client.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if listErr = err; err != nil {
			return false, nil // the apiserver, busy or restarting: ask again
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				last = e.Note
				if strings.Contains(e.Note, want) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		if listErr != nil {
			err = fmt.Errorf("%w; the last List failed: %w", err, listErr)
		}
		t.Fatalf("no %s event for %s/%s containing %q (last: %q): %v", reason, ns, name, want, last, err)
	}
	return last
}

func describeAllocation(a *gpusharev1.Allocation) string {
	var b strings.Builder
	for _, c := range a.Containers {
		fmt.Fprintf(&b, "%s:", c.Name)
		for _, g := range c.GPUs {
			fmt.Fprintf(&b, " gpu%d %dMiB %d%%", g.Index, g.MemoryMiB, g.Compute)
		}
		b.WriteString("; ")
	}
	return b.String()
}

// clientFor returns a client with the credentials in kubeconfig.
func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// schedulerConfigWith returns deploy/scheduler-config.yaml with every
// profile's nodePolicy set to policy; it fails if the file sets none.
func schedulerConfigWith(t testing.TB, policy string) []byte {
	t.Helper()
	b := readFile(t, "deploy/scheduler-config.yaml")
	re := regexp.MustCompile(`(?m)^(\s*)nodePolicy: \S+$`)
	if !re.Match(b) {
		t.Fatal("deploy/scheduler-config.yaml sets no nodePolicy to replace")
	}
	return re.ReplaceAll(b, []byte("${1}nodePolicy: "+policy))
}

// fitChecker returns the built-in resource model and a binpack Placer:
// what the tests use to judge, from the pods' records, whether a pending
// pod would fit somewhere.
func fitChecker(t testing.TB) (*resource.Model, *alloc.Placer) {
	t.Helper()
	model, err := resource.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	placer, err := alloc.NewPlacer(alloc.Config{Node: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	return model, placer
}
