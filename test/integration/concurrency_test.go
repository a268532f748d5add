package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// concurrencyNodes: 50 nodes, 200 GPUs; 10 nodes hand out whole cards.
func concurrencyNodes() []controlplane.NodeSpec {
	var specs []controlplane.NodeSpec
	for i := range 40 {
		specs = append(specs, controlplane.NodeSpec{Name: fmt.Sprintf("t4-%02d", i), Model: "Tesla T4", MemoryMiB: 15360, Count: 4})
	}
	for i := range 10 {
		specs = append(specs, controlplane.NodeSpec{Name: fmt.Sprintf("l4-whole-%02d", i), Model: "NVIDIA L4", MemoryMiB: 23034, Count: 4, WholeCard: true})
	}
	return specs
}

// mixedPods returns n pods of a seeded mix, named prefix-NNN and labelled
// app=app: memory shares, memory and compute shares, one and two whole
// GPUs (by gpu-core and by gpu-count), and two-container pods.
func mixedPods(n int, seed uint64, prefix, app string) []*corev1.Pod {
	rng := rand.New(rand.NewPCG(seed, 500))
	q := func(v int64) k8sresource.Quantity { return *k8sresource.NewQuantity(v, k8sresource.DecimalSI) }
	container := func(name string, limits corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: name, Image: "busybox", Resources: corev1.ResourceRequirements{Limits: limits}}
	}
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		var cs []corev1.Container
		switch r := rng.IntN(100); {
		case r < 40:
			cs = []corev1.Container{container("main", corev1.ResourceList{"gpushare.io/gpu-mem": q(1024 * (2 + rng.Int64N(5)))})}
		case r < 60:
			cs = []corev1.Container{container("main", corev1.ResourceList{"gpushare.io/gpu-mem": q(4096), "gpushare.io/gpu-core": q(30)})}
		case r < 75:
			cs = []corev1.Container{container("main", corev1.ResourceList{"gpushare.io/gpu-core": q(100)})}
		case r < 80:
			cs = []corev1.Container{container("main", corev1.ResourceList{"gpushare.io/gpu-core": q(200)})}
		case r < 90:
			cs = []corev1.Container{container("main", corev1.ResourceList{"gpushare.io/gpu-count": q(1)})}
		default:
			cs = []corev1.Container{
				container("model", corev1.ResourceList{"gpushare.io/gpu-mem": q(2048)}),
				container("sidecar", corev1.ResourceList{"gpushare.io/gpu-mem": q(2048)}),
			}
		}
		pods[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%03d", prefix, i), Namespace: "default", Labels: map[string]string{"app": app}},
			Spec:       corev1.PodSpec{Containers: cs},
		}
	}
	return pods
}

// TestConcurrentPods: 500 mixed pods created at once over 50 nodes, through
// gpushare-scheduler and through kube-scheduler with gpushare-extender.
// Afterwards no GPU is over-committed (recomputed from the pod records),
// and no Pending pod would fit anywhere under the records.
func TestConcurrentPods(t *testing.T) {
	t.Run("plugin", func(t *testing.T) {
		c, _, _ := startPlugin(t, nil)
		checkConcurrent(t, c)
	})
	t.Run("extender", func(t *testing.T) {
		c := startCluster(t)
		startSecureExtender(t, c).startScheduler(t, c)
		checkConcurrent(t, c)
	})
}

func checkConcurrent(t *testing.T, c *controlplane.Cluster) {
	t.Helper()
	ctx := context.Background()
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	createNodes(t, client, concurrencyNodes()...)
	// More GPUs than the 50 nodes have: some must stay Pending.
	pods := mixedPods(500, 42, "mixed", "mixed")
	start := time.Now()
	createAll(t, client, pods)
	bound := waitSettled(t, client, "app=mixed", 10*time.Second, 3*time.Minute)
	t.Logf("%d of %d pods bound; settled %v after the first create", bound, len(pods), time.Since(start).Round(time.Second))

	states, booked := recompute(t, client)
	if booked != bound {
		t.Errorf("%d pods are bound but %d hold GPUs by their records", bound, booked)
	}
	model, placer := fitChecker(t)
	list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=mixed"})
	if err != nil {
		t.Fatal(err)
	}
	pending := 0
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName != "" {
			continue
		}
		pending++
		req, err := model.PodRequest(pod)
		if err != nil {
			t.Fatalf("pod %s: %v", pod.Name, err)
		}
		for name, s := range states {
			if p, _ := placer.Place(s, req); p != nil {
				t.Errorf("pod %s is Pending but fits node %s under the records", pod.Name, name)
				break
			}
		}
	}
	if pending == 0 {
		t.Errorf("every pod was bound: the workload is meant to ask for more GPUs than the nodes have")
	}
}

// createAll creates the pods from 16 goroutines at once.
func createAll(t *testing.T, client kubernetes.Interface, pods []*corev1.Pod) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan *corev1.Pod)
	)
	for range 16 {
		wg.Go(func() {
			for p := range next {
				if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range pods {
		next <- p
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("creating pods: %d errors, first: %v", len(errs), errs[0])
	}
}

// waitSettled waits until the number of bound pods matching selector has
// not changed for quiet, and returns it.
func waitSettled(t *testing.T, client kubernetes.Interface, selector string, quiet, timeout time.Duration) int {
	t.Helper()
	last, since := -1, time.Now()
	err := waitFor(timeout, func() (bool, error) {
		list, err := client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		if n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= quiet, nil
	})
	if err != nil {
		t.Fatalf("bound pods never settled (last %d): %v", last, err)
	}
	return last
}
