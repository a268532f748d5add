package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/deviceplugin/kubelettest"
)

// TestDevicePluginEndToEnd: gpushare-scheduler records each pod's GPU;
// the kubelet's device manager (in this process) admits the pods and
// starts their containers through gpushare-node's device plugins; every
// container's environment names exactly the GPU and share of its record.
// 100 identical pods start at once on one node of 8 GPUs.
func TestDevicePluginEndToEnd(t *testing.T) {
	c, client, _ := startPlugin(t, nil)
	ctx := context.Background()
	bareNode(t, client, "gpu-0")
	// Unix socket paths are short: keep the directory near the root.
	dir, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kubelet := kubelettest.Start(t, dir)
	files := map[string]string{
		"gpus.yaml": "gpus:\n- {model: Tesla T4, memoryMiB: 16384, count: 8, numaNodes: 2, nvlink: pairs}\n",
		"args.yaml": "apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nresourceModel:\n  resources:\n" +
			"  - {name: gpushare.io/gpu-mem, kind: Memory}\n  - {name: gpushare.io/gpu-core, kind: Compute}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cdiDir := filepath.Join(dir, "cdi")
	daemon, err := c.Run("gpushare-node", nodeBin(t), "--kubeconfig="+c.Kubeconfig, "--node-name=gpu-0",
		"--simulated-gpus="+filepath.Join(dir, "gpus.yaml"), "--config="+filepath.Join(dir, "args.yaml"),
		"--device-plugin-dir="+dir, "--pod-resources-socket="+kubelet.PodResourcesSocket(), "--cdi-dir="+cdiDir,
		"--metrics-bind-address=", "--usage-interval=0", "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	kubelet.WaitAllocatable("gpushare.io/gpu-mem", 8*16384)

	const pods = 100
	for i := range pods {
		if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod(fmt.Sprintf("same-%03d", i), 1024, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var bound []corev1.Pod
	err = waitFor(2*time.Minute, func() (bool, error) {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		bound = bound[:0]
		for _, p := range list.Items {
			if _, ok := p.Annotations[gpusharev1.AllocationAnnotation]; ok && p.Spec.NodeName == "gpu-0" {
				bound = append(bound, p)
			}
		}
		return len(bound) == pods, nil
	})
	if err != nil {
		t.Fatalf("%d of %d pods bound to gpu-0: %v", len(bound), pods, err)
	}
	// Admission is one pod after another in the kubelet; starts are not.
	for i := range bound {
		if err := kubelet.Admit(&bound[i]); err != nil {
			t.Fatalf("admitting %s: %v", bound[i].Name, err)
		}
	}
	var wg sync.WaitGroup
	gpusUsed := sync.Map{}
	for i := range bound {
		pod := &bound[i]
		wg.Go(func() {
			want := record(t, pod).Containers[0].GPUs[0]
			opts, err := kubelet.StartContainer(pod, "main")
			if err != nil {
				t.Errorf("starting %s: %v", pod.Name, err)
				return
			}
			var names []string
			for _, d := range opts.CDIDevices {
				names = append(names, d.Name)
			}
			env, err := deviceplugin.EnvOf(cdiDir, names)
			if err != nil {
				t.Errorf("%s: %v", pod.Name, err)
				return
			}
			if env["NVIDIA_VISIBLE_DEVICES"] != want.UUID || env["GPUSHARE_GPU_MEMORY_MIB"] != strconv.FormatInt(want.MemoryMiB, 10) {
				t.Errorf("pod %s was recorded on GPU %d (%s, %d MiB); its container sees %q with %s MiB",
					pod.Name, want.Index, want.UUID, want.MemoryMiB, env["NVIDIA_VISIBLE_DEVICES"], env["GPUSHARE_GPU_MEMORY_MIB"])
			}
			gpusUsed.Store(want.UUID, true)
		})
	}
	wg.Wait()
	n := 0
	gpusUsed.Range(func(any, any) bool { n++; return true })
	t.Logf("%d containers started on %d GPUs, each with its recorded GPU", pods, n)
	if rss, err := residentMiB(daemon.Cmd.Process.Pid); err == nil {
		t.Logf("gpushare-node RSS with 8 GPUs and %d pods, as the last started: %.1f MiB", pods, rss)
	}
	// Between bursts the daemon drops its PodResources listing and gives
	// the memory back.
	time.Sleep(5 * time.Second)
	if rss, err := residentMiB(daemon.Cmd.Process.Pid); err == nil {
		t.Logf("gpushare-node RSS with 8 GPUs and %d pods, settled: %.1f MiB", pods, rss)
	}
}

// residentMiB reads a process's resident memory.
func residentMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kib / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for process %d", pid)
}
