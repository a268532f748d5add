package integration

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/cmd/kubectl-inspect-gpushare/app"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// BenchmarkInspect times `kubectl inspect gpushare` (the table) in-process
// against a real apiserver holding 5,000 nodes of 8 GPUs and 40,000 pods,
// one per GPU, bound with their records (GPUSHARE_INSPECT_NODES changes
// the node count). It reports the wall time per run and the CPU time of
// this process, the tool's own (the apiserver runs apart).
// `make bench-inspect` runs it.
func BenchmarkInspect(b *testing.B) {
	if skip != "" {
		b.Skip(skip)
	}
	nodes := 5000
	if s := os.Getenv("GPUSHARE_INSPECT_NODES"); s != "" {
		var err error
		if nodes, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	// Without kwok's heartbeats the node lifecycle controller would taint
	// the nodes and evict the pods.
	c, err := controlplane.Start(ctx, controlplane.Options{Tools: tools, NoKwok: true, QPS: 5000, Burst: 10000,
		ControllerManagerArgs: []string{"--controllers=*,-node-lifecycle-controller"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	client, err := c.Client()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	populate(b, client, nodes)
	b.Logf("created %d nodes and %d pods in %s", nodes, nodes*8, time.Since(start).Round(time.Second))

	// One run to check the numbers: every GPU holds 10 GiB.
	var out strings.Builder
	runInspect(b, c.Kubeconfig, &out, "--unit", "MiB")
	want := fmt.Sprintf("Allocated/Total GPU Memory In Cluster:\n%d/%d (12%%)\n", nodes*8*10240, nodes*8*81559)
	if !strings.HasSuffix(out.String(), want) {
		b.Fatalf("the table does not end in %q:\n...%s", want, out.String()[max(0, out.Len()-500):])
	}
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		before := cpuTime()
		runInspect(b, c.Kubeconfig, io.Discard)
		cpu += cpuTime() - before
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/op")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
}

func runInspect(b *testing.B, kubeconfig string, out io.Writer, args ...string) {
	cmd := app.NewCmd(genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: os.Stderr})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// populate creates n nodes of 8 H100s and, on each GPU, a pod bound with
// a record of 10 GiB, controlplane.InFlight requests at a time.
func populate(b *testing.B, client kubernetes.Interface, n int) {
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := controlplane.Parallel(ctx, n, func(i int) error { return benchNode(ctx, client, i) }); err != nil {
		b.Fatal(err)
	}
}

func benchNode(ctx context.Context, client kubernetes.Interface, i int) error {
	spec := controlplane.NodeSpec{Name: fmt.Sprintf("gpu-%05d", i), Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Count: 8}
	if err := controlplane.CreateNode(ctx, client, spec); err != nil {
		return err
	}
	for g := range spec.Count {
		a := &gpusharev1.Allocation{Node: spec.Name, Containers: []gpusharev1.ContainerAllocation{{Name: "main", Kind: gpusharev1.ContainerApp,
			GPUs: []gpusharev1.GPUShare{{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", spec.Name, g), MemoryMiB: 10240}}}}}
		value, err := gpusharev1.Marshal(a)
		if err != nil {
			return err
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("%s-%d", spec.Name, g),
				Labels: map[string]string{"app": "bench"}, Annotations: map[string]string{gpusharev1.AllocationAnnotation: value}},
			Spec: corev1.PodSpec{NodeName: spec.Name, SchedulerName: "gpushare-scheduler", Containers: []corev1.Container{{
				Name: "main", Image: "busybox", Command: []string{"sleep", "infinity"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"gpushare.io/gpu-mem": k8sresource.MustParse("10240")}}}}},
		}
		if _, err := client.CoreV1().Pods("bench").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", pod.Name, err)
		}
	}
	return nil
}
