package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// imageTag is the tag of the images the real-node tests build.
const imageTag = "e2e"

// probeImage is the real node's pod sandbox and, through the mirror, every
// image a seed example names.
const probeImage = "ghcr.io/gpushare/gpushare-probe:" + imageTag

var testImages struct {
	once sync.Once
	dir  string
	err  error
}

// images builds gpushare-scheduler, gpushare-node and the test workload
// gpushare-probe as `make images` does (hack/image), once per run, and
// returns the directory of their OCI layouts.
func images(t *testing.T) string {
	t.Helper()
	testImages.once.Do(func() {
		testImages.dir = filepath.Join(binDir, "images")
		cmd := exec.Command("go", "-C", "hack/image", "run", ".", "--out", testImages.dir,
			"--images=gpushare-scheduler,gpushare-node,gpushare-probe", "--version="+imageTag)
		var out bytes.Buffer
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, &out, &out
		if err := cmd.Run(); err != nil {
			testImages.err = fmt.Errorf("building the images: %v\n%s", err, out.String())
		}
	})
	if testImages.err != nil {
		t.Fatal(testImages.err)
	}
	return testImages.dir
}

// realCluster is a control plane with one real node (kubelet, containerd,
// runc) and gpushare installed from its chart and images: the scheduler
// and the node daemon run as the chart's pods there.
type realCluster struct {
	c      *controlplane.Cluster
	client kubernetes.Interface
	node   *controlplane.RealNode
}

// realNodeGPUs are the real node's simulated GPUs.
const realNodeGPUs = "gpus:\n- {model: Tesla T4, memoryMiB: 15360, count: 2}\n"

func startRealCluster(t *testing.T, values ...string) *realCluster {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
	dir := images(t)
	ctx := context.Background()
	c, err := controlplane.Start(ctx, controlplane.Options{Tools: tools, NoKwok: true})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.Processes() {
				t.Logf("--- %s log (tail) ---\n%s", p.Name, p.Tail(4000))
			}
		}
		c.Stop()
	})
	rc := &realCluster{c: c}
	if rc.client, err = c.Client(); err != nil {
		t.Fatal(err)
	}
	mirror, err := controlplane.ServeImage(filepath.Join(dir, "gpushare-probe"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mirror.Close() })
	rc.node, err = c.StartRealNode(ctx, controlplane.RealNodeOptions{
		Name: "gpu-real",
		Images: map[string]string{
			"ghcr.io/gpushare/gpushare-scheduler": filepath.Join(dir, "gpushare-scheduler"),
			"ghcr.io/gpushare/gpushare-node":      filepath.Join(dir, "gpushare-node"),
			"ghcr.io/gpushare/gpushare-probe":     filepath.Join(dir, "gpushare-probe"),
		},
		SandboxImage: probeImage,
		Mirror:       mirror.Host,
		Labels:       map[string]string{"gpushare": "true"},
	})
	if err != nil {
		t.Fatalf("starting the real node: %v", err)
	}
	sim := filepath.Join(c.Dir, "nodes", "gpu-real", "sim")
	if err := os.MkdirAll(sim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sim, "gpus.yaml"), []byte(realNodeGPUs), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartScheduler(ctx, "kube-scheduler", tools.Bin("kube-scheduler"), []byte(stockSchedulerConfig)); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"install", "gpushare", chart, "--kubeconfig", c.Kubeconfig,
		"--namespace", chartNamespace, "--create-namespace", "--wait", "--timeout", "4m",
		"--set", "image.tag=" + imageTag, "--set", "scheduler.replicas=1",
		"--set", "node.cdiDir=" + rc.node.CDIDir,
		"--set-json", `node.extraArgs=["--simulated-gpus=/etc/gpushare-sim/gpus.yaml"]`,
		"--set-json", `node.extraVolumes=[{"name":"sim","hostPath":{"path":"` + sim + `","type":"Directory"}}]`,
		"--set-json", `node.extraVolumeMounts=[{"name":"sim","mountPath":"/etc/gpushare-sim","readOnly":true}]`,
	}, seedValues...)
	helm(t, append(args, values...)...)
	err = waitFor(2*time.Minute, func() (bool, error) {
		n, err := rc.client.CoreV1().Nodes().Get(ctx, "gpu-real", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := n.Annotations[gpusharev1.InventoryAnnotation]
		return ok, nil
	})
	if err != nil {
		t.Fatalf("gpushare-node did not publish the real node's GPUs: %v", err)
	}
	return rc
}

// exec runs command in a container of a pod, as kubectl exec does, and
// returns its standard output.
func (rc *realCluster) exec(t *testing.T, ns, pod, container string, command ...string) []byte {
	t.Helper()
	args := append([]string{"--kubeconfig=" + rc.c.Kubeconfig, "exec", "-n", ns, pod, "-c", container, "--"}, command...)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(tools.Bin("kubectl"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl exec %s/%s -c %s %v: %v: %s", ns, pod, container, command, err, stderr.String())
	}
	return stdout.Bytes()
}

// probeReport is what gpushare-probe report prints.
type probeReport struct {
	Env     map[string]string   `json:"env"`
	Devices []string            `json:"devices"`
	Paths   map[string][]string `json:"paths"`
}

func (rc *realCluster) report(t *testing.T, ns, pod, container string, paths ...string) probeReport {
	t.Helper()
	out := rc.exec(t, ns, pod, container, append([]string{"gpushare-probe", "report"}, paths...)...)
	var r probeReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s/%s: %v: %s", ns, pod, err, out)
	}
	return r
}

func TestRealNode(t *testing.T) {
	rc := startRealCluster(t)
	ctx := context.Background()
	pod := gpuPod("real-1", 4096, 0)
	pod.Spec.SchedulerName = "gpu-scheduler"
	if _, err := rc.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, rc.client, "default", "real-1", "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	r := rc.report(t, "default", p.Name, p.Spec.Containers[0].Name)
	t.Logf("%+v", r)
}
