package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// make demo's real node: the demo starts it, its summary says which pods
// really run and what the demo's own pod's container sees, and make
// demo-down stops it all, leaving no kubelet directory, bridge, shim or
// process behind. The test's demo takes the machine's default real node,
// as make demo's does, and a private real node of another cluster then
// runs a pod beside it, as make test's do beside make demo's; while make
// demo's runs (make test beside it), the test's demo runs a private one.
func TestRealNodeDemo(t *testing.T) {
	needRealNode(t)
	layouts := images(t)
	private := controlplane.RealNodeServes(false)
	kubeletDir, bridge := controlplane.KubeletRoot, "gpushare0"
	if private {
		t.Log("a real node (make demo's) holds /var/lib/kubelet: the test's demo runs a private one beside it")
		kubeletDir, bridge = controlplane.PrivateKubeletRoot, "gpushare1"
	}
	build := exec.Command("go", "build", "-o", binDir+"/", "./cmd/gpushare-demo", "./cmd/gpushare-node", "./cmd/gpushare-dra")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	dir := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() {
			if keep := logDir(t); keep != "" {
				_ = os.CopyFS(keep, os.DirFS(filepath.Join(dir, "logs")))
				t.Logf("the demo's logs kept in %s", keep)
			}
		}
	})
	demo := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(binDir, "gpushare-demo"), append([]string{"--dir=" + dir, "--real-node-private=" + strconv.FormatBool(private),
			"--scheduler=" + schedulerBin, "--node-daemon=" + filepath.Join(binDir, "gpushare-node"),
			"--dra-daemon=" + filepath.Join(binDir, "gpushare-dra"), "--webhook=" + webhookBin,
			"--probe-image=" + filepath.Join(layouts, "gpushare-probe")}, args...)...)
		var out bytes.Buffer
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	down := func() {
		if out, err := demo("down"); err != nil {
			t.Errorf("gpushare-demo down: %v\n%s", err, out)
		}
	}
	out, err := demo("--real-node=on", "up")
	if err != nil {
		down()
		t.Fatalf("gpushare-demo up: %v\n%s", err, out)
	}
	_, summary, ok := strings.Cut(out, "Pods whose containers really run")
	if !ok {
		down()
		t.Fatalf("the demo's summary says nothing of the real node:\n%s", out)
	}
	// The demo's own pod runs, and its container sees one of the real
	// node's GPUs, its 4 GiB and that GPU's device node.
	check := regexp.MustCompile(`default/real-node-check +Running +main running\n +NVIDIA_VISIBLE_DEVICES=GPU-sim-gpu-real-0-0000-000(\d) GPUSHARE_GPU_MEMORY_MIB=4096 devices: /dev/nvidia(\d)\n`)
	if m := check.FindStringSubmatch(summary); m == nil || m[1] != m[2] {
		t.Errorf("the summary does not show default/real-node-check running with one GPU, its device node and 4096 MiB:\n%s", summary)
	}
	// Its pod of a ResourceClaim, through gpushare-dra, sees one GPU and
	// the claim's 3 GiB.
	claimCheck := regexp.MustCompile(`default/real-node-claim-check +Running +main running\n +NVIDIA_VISIBLE_DEVICES=GPU-sim-gpu-real-0-0000-000(\d) GPUSHARE_GPU_MEMORY_MIB=3072 devices: /dev/nvidia(\d)\n`)
	if m := claimCheck.FindStringSubmatch(summary); m == nil || m[1] != m[2] {
		t.Errorf("the summary does not show default/real-node-claim-check running with one GPU, its device node and 3072 MiB:\n%s", summary)
	}
	if strings.Contains(summary, "could not ask") {
		t.Errorf("the demo could not ask a running container what it sees:\n%s", summary)
	}
	// Two teams under GPU quotas: the last pod of each is refused with
	// the numbers, and inspect sets their use against what they hold.
	for _, want := range []string{
		"team-a/train-1: refused: pods \"train-1\" is forbidden: exceeded quota: gpus, requested: requests.gpushare.io/quota-memory=20Gi, " +
			"used: requests.gpushare.io/quota-memory=36Gi, limited: requests.gpushare.io/quota-memory=48Gi",
		"team-b/notebook-1: refused: pods \"notebook-1\" is forbidden: exceeded quota: gpus",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the demo's output does not say %q:\n%s", want, summary)
		}
	}
	// Gangs: one placed whole, one that can never fit placed not at all,
	// and inspect says why.
	for _, row := range []*regexp.Regexp{
		regexp.MustCompile(`\nteam-a/allreduce +3 +3 +3 +Scheduled +placed\n`),
		// Two L4s, four with the real node: never all five.
		regexp.MustCompile(`\ndefault/too-wide +5 +5 +0 +Unschedulable +never fits: even with every GPU free, [24] of the 5 pod\(s\) it needs fit at once\n`),
	} {
		if !row.MatchString(summary) {
			t.Errorf("kubectl inspect gpushare gangs has no row %s:\n%s", row, summary)
		}
	}
	// team-a: train-0 and infer-0 (36 GiB) and its gang (3 x 4 GiB).
	if row := regexp.MustCompile(`\nteam-a +gpus +48/48 +50/300 +48 +50 +0\n`); !row.MatchString(summary) {
		t.Errorf("kubectl inspect gpushare quota does not show team-a at 48 of 48 GiB, 50 of 300%%, all of it booked:\n%s", summary)
	}
	if _, err := os.Stat(filepath.Join(kubeletDir, "device-plugins", "kubelet.sock")); err != nil {
		t.Errorf("the demo's kubelet serves no device plugins: %v", err)
	}
	if !private {
		besidePrivateNode(t, layouts)
	}
	pids, _ := os.ReadFile(filepath.Join(dir, "pids"))

	down()
	if _, err := os.Stat(kubeletDir); !os.IsNotExist(err) {
		t.Errorf("make demo-down left %s (%v)", kubeletDir, err)
	}
	if err := exec.Command("ip", "link", "show", bridge).Run(); err == nil {
		t.Errorf("make demo-down left the bridge %s", bridge)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(" "+dir+"/")) {
		t.Errorf("make demo-down left mounts under the demo's directory")
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(pids)), "\n") {
		var pid int
		var name string
		if _, err := fmt.Sscan(line, &pid, &name); err == nil && pid > 1 && controlplane.Runs(pid) {
			t.Errorf("make demo-down left %s (pid %d) running", name, pid)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte("containerd-shim")) && bytes.Contains(b, []byte(dir)) {
			t.Errorf("make demo-down left a shim: %s", bytes.ReplaceAll(b, []byte{0}, []byte(" ")))
		}
	}
}

// besidePrivateNode starts a private real node in a cluster of its own
// beside the machine's default one (the demo's) and runs a pod on it: its
// kubelet, containerd and bridge take nothing the other holds, and
// stopping it leaves the other's kubelet serving. It fails the test with
// Errorf only: the demo's node must still be stopped after it.
func besidePrivateNode(t *testing.T, layouts string) {
	t.Helper()
	ctx := context.Background()
	c, err := controlplane.Start(ctx, controlplane.Options{Tools: tools, NoKwok: true})
	if err != nil {
		t.Errorf("starting the second control plane: %v", err)
		return
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			c.Stop()
		}
	}
	defer stop()
	mirror, err := controlplane.ServeImage(filepath.Join(layouts, "gpushare-probe"), "")
	if err != nil {
		t.Error(err)
		return
	}
	defer func() { _ = mirror.Close() }()
	n, err := c.StartRealNode(ctx, controlplane.RealNodeOptions{
		Name:         "gpu-real-beside",
		Images:       map[string]string{"ghcr.io/gpushare/gpushare-probe": filepath.Join(layouts, "gpushare-probe")},
		SandboxImage: probeImage,
		Mirror:       mirror.Host,
		Private:      true,
	})
	if err != nil {
		t.Errorf("starting a private real node beside the demo's: %v", err)
		return
	}
	if n.KubeletDir != controlplane.PrivateKubeletRoot || n.Bridge() != "gpushare1" {
		t.Errorf("the private node's kubelet directory and bridge are %s and %s, want %s and gpushare1", n.KubeletDir, n.Bridge(), controlplane.PrivateKubeletRoot)
	}
	client, err := c.Client()
	if err != nil {
		t.Error(err)
		return
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "beside", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName:   n.Name,
		Containers: []corev1.Container{{Name: "main", Image: "busybox", Command: []string{"sleep", "infinity"}}}}}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Error(err)
		return
	}
	err = waitFor(2*time.Minute, func() (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	if err != nil {
		t.Errorf("the pod on the private node beside the demo's did not run: %v", err)
	} else {
		t.Logf("a private real node of a second cluster ran a pod beside the demo's (bridge %s, kubelet directory %s)", n.Bridge(), n.KubeletDir)
	}
	stop()
	if !controlplane.RealNodeServes(false) {
		t.Error("stopping the private real node stopped the demo's kubelet serving device plugins")
	}
	if _, err := os.Stat(controlplane.PrivateKubeletRoot); !os.IsNotExist(err) {
		t.Errorf("the private real node left %s (%v)", controlplane.PrivateKubeletRoot, err)
	}
	if err := exec.Command("ip", "link", "show", "gpushare1").Run(); err == nil {
		t.Error("the private real node left the bridge gpushare1")
	}
}
