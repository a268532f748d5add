package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// applyHookPolicy applies deploy/gpu-hook-policy.yaml and waits until the
// API server enforces it.
func applyHookPolicy(t testing.TB, client kubernetes.Interface) {
	t.Helper()
	if err := controlplane.ApplyHookPolicy(context.Background(), client, readFile(t, "deploy/gpu-hook-policy.yaml")); err != nil {
		t.Fatal(err)
	}
}

// hooks returns each container's hook in limits and requests, "-" where
// it has none, by container name.
func hooks(p *corev1.Pod) map[string][2]string {
	out := map[string][2]string{}
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			got := [2]string{"-", "-"}
			for i, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
				if q, ok := l[gpusharev1.HookResource]; ok {
					got[i] = q.String()
				}
			}
			out[c.Name] = got
		}
	}
	return out
}

// TestHookPolicy: with deploy/gpu-hook-policy.yaml in force, every seed
// example schedules as before, each container that asks for GPUs holds
// one hook (limits and requests) and no other container does; a pod that
// sets a hook of its own other than that is refused with the reason.
func TestHookPolicy(t *testing.T) {
	t.Parallel()
	_, client, _ := startPlugin(t, nil)
	applyHookPolicy(t, client)
	booked, _ := checkSeeds(t, client)

	ctx := context.Background()
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hooked := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		got := hooks(p)
		// The n-th container that asks for GPUs, init containers first,
		// holds n.
		n := 0
		for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for _, c := range list {
				want := [2]string{"-", "-"}
				for name := range c.Resources.Limits {
					if strings.Contains(string(name), "gpu") && name != gpusharev1.HookResource {
						n++
						want = [2]string{strconv.Itoa(n), strconv.Itoa(n)}
						hooked++
						break
					}
				}
				if got[c.Name] != want {
					t.Errorf("pod %s/%s container %s: hooks (limits, requests) %v; want %v", p.Namespace, p.Name, c.Name, got[c.Name], want)
				}
			}
		}
	}
	if hooked < booked {
		t.Errorf("%d containers hold hooks; %d pods hold GPUs", hooked, booked)
	}
	t.Logf("%d GPU containers in %d pods got their hooks", hooked, booked)

	// A container that asks no GPU but writes a hook: refused with the
	// reason. A GPU container that writes two where it should hold one:
	// set right.
	one := *k8sresource.NewQuantity(1, k8sresource.DecimalSI)
	two := *k8sresource.NewQuantity(2, k8sresource.DecimalSI)
	noGPU := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "no-gpu", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpusharev1.HookResource: one}}}}}}
	twoHooks := gpuPod("two-hooks", 1024, 0)
	twoHooks.Spec.Containers[0].Resources.Limits[gpusharev1.HookResource] = two
	_, err = client.CoreV1().Pods("default").Create(ctx, noGPU, metav1.CreateOptions{})
	if want := "gpushare.io/gpu-hook: container main holds 1, wants none: the n-th container"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("pod %s: %v; want it refused: %s", noGPU.Name, err, want)
	}
	p, err := client.CoreV1().Pods("default").Create(ctx, twoHooks, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("pod %s: %v", twoHooks.Name, err)
	}
	if got := hooks(p)["main"]; got != [2]string{"1", "1"} {
		t.Errorf("pod %s written with 2 hooks holds (limits, requests) %v; want 1 and 1", p.Name, got)
	}
}
