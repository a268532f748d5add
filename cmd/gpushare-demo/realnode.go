package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// realNode is the demo's node with a kubelet and containerd: the
// containers of its pods really start (docs/real-node.md). Its GPUs are
// simulated, served to the kubelet by gpushare-node's device plugins.
var realNode = controlplane.NodeSpec{Name: "gpu-real-0", Model: "NVIDIA L4", MemoryMiB: 23034, Count: 2}

// probeRef is the test workload image's reference, without its tag: the
// real node's pod sandbox, and through the mirror every image its pods
// name.
const probeRef = "ghcr.io/gpushare/gpushare-probe"

// checkPod is the demo's own pod on the real node: it asks 4 GiB of a
// GPU, and the demo asks its container what it sees.
const checkPod = "real-node-check"

// realNodeMissing says why the demo cannot have a real node here; "" if
// it can.
func realNodeMissing(c *controlplane.Cluster, o options) string {
	if os.Geteuid() != 0 {
		return "it needs root (the kubelet and containerd manage cgroups, mounts and network namespaces)"
	}
	if err := c.Tools.RealNodeTools(); err != nil {
		return err.Error() + " (make cluster-tools builds them)"
	}
	if _, err := os.Stat(filepath.Join(o.probeImage, "index.json")); err != nil {
		return "no workload image at " + o.probeImage + " (make demo builds it)"
	}
	return ""
}

// startRealNode starts the real node's image mirror (a process of its
// own: it outlives this command), the node (kubelet, containerd, runc,
// the CNI bridge) and its gpushare-node, a host process with the device
// plugins on, configured as the chart configures it: the scheduler's
// resource model (the kubelet must count each resource in the unit the
// scheduler does) and, with the hook policy, --hook-memory.
func startRealNode(ctx context.Context, c *controlplane.Cluster, o options, schedulerConfig []byte) error {
	raw, err := argsYAML(schedulerConfig)
	if err != nil {
		return err
	}
	argsFile := filepath.Join(c.Dir, "args-"+realNode.Name+".yaml")
	if err := os.WriteFile(argsFile, raw, 0o600); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	port, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	mirror := fmt.Sprintf("127.0.0.1:%d", port)
	if _, err := c.Run("image-mirror", self, "--listen="+mirror, "serve-image", o.probeImage); err != nil {
		return err
	}
	tag, err := layoutTag(o.probeImage)
	if err != nil {
		return err
	}
	n, err := c.StartRealNode(ctx, controlplane.RealNodeOptions{
		Name:         realNode.Name,
		Images:       map[string]string{probeRef: o.probeImage},
		SandboxImage: probeRef + ":" + tag,
		Mirror:       mirror,
		Labels:       map[string]string{"gpushare": "true"},
		Detached:     true,
		Private:      o.realNodePrivate,
	})
	if err != nil {
		return err
	}
	kubeconfig, err := c.NodeDaemonKubeconfig(ctx, realNode.Name, daemonTokenTTL)
	if err != nil {
		return err
	}
	gpus := filepath.Join(c.Dir, "gpus-"+realNode.Name+".yaml")
	// Stand-ins for the GPUs' device nodes, which the CDI specs hand the
	// containers.
	devices := filepath.Join(c.Dir, "devices-"+realNode.Name)
	if err := controlplane.StandInDevices(devices, realNode.Count); err != nil {
		return err
	}
	if err := os.WriteFile(gpus, []byte(realNode.SimulatedGPUs()+"deviceDir: "+devices+"\n"), 0o600); err != nil {
		return err
	}
	if port, err = controlplane.FreePort(); err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	daemonArgs := []string{"--kubeconfig=" + kubeconfig, "--config=" + argsFile,
		"--node-name=" + realNode.Name, "--simulated-gpus=" + gpus, "--metrics-bind-address=" + addr,
		"--cdi-dir=" + n.CDIDir, "--device-plugin-dir=" + filepath.Join(n.KubeletDir, "device-plugins"),
		"--pod-resources-socket=" + filepath.Join(n.KubeletDir, "pod-resources", "kubelet.sock")}
	if o.hookPolicy != "" {
		daemonArgs = append(daemonArgs, "--hook-memory")
	}
	if _, err := c.Run("gpushare-node-"+realNode.Name, o.nodeDaemon, daemonArgs...); err != nil {
		return err
	}
	fmt.Printf("    %-14s %d x %s (%d MiB), shared; a real kubelet and containerd; metrics at http://%s/metrics\n",
		realNode.Name, realNode.Count, realNode.Model, realNode.MemoryMiB, addr)
	if o.draDaemon == "" {
		return nil
	}
	return startDRA(ctx, c, o, n, kubeconfig, gpus)
}

// startDRA runs gpushare-dra on the real node as the chart does with
// dra.enabled: its role and admission policy, the DeviceClass, and the
// driver with gpushare-node's account, on the same simulated GPUs,
// registered with the node's kubelet.
func startDRA(ctx context.Context, c *controlplane.Cluster, o options, n *controlplane.RealNode, kubeconfig, gpus string) error {
	client, err := c.Client()
	if err != nil {
		return err
	}
	for _, f := range []string{o.draRBAC, o.draClass} {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := controlplane.Apply(ctx, client, b); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	port, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	health := fmt.Sprintf("127.0.0.1:%d", port)
	if _, err := c.Run("gpushare-dra-"+realNode.Name, o.draDaemon, "--kubeconfig="+kubeconfig, "--node-name="+realNode.Name,
		"--simulated-gpus="+gpus, "--cdi-dir="+n.CDIDir, "--health-bind-address="+health,
		"--plugin-dir="+filepath.Join(n.KubeletDir, "plugins", "gpu.gpushare.io"),
		"--registry-dir="+filepath.Join(n.KubeletDir, "plugins_registry")); err != nil {
		return err
	}
	fmt.Printf("    %-14s its GPUs also as DRA devices of gpu.gpushare.io (gpushare-dra; ready at http://%s/readyz)\n", "", health)
	return nil
}

// layoutTag is the tag of the one image in an OCI layout (hack/image).
func layoutTag(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return "", err
	}
	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(b, &index); err != nil || len(index.Manifests) != 1 {
		return "", fmt.Errorf("%s: not a layout of one image", dir)
	}
	tag := index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	if tag == "" {
		return "", fmt.Errorf("%s: its image has no tag", dir)
	}
	return tag, nil
}

// createCheckPod asks the real node for 4 GiB of a GPU.
func createCheckPod(ctx context.Context, client kubernetes.Interface, tag string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: checkPod, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: realNode.Name},
			Containers: []corev1.Container{{Name: "main", Image: probeRef + ":" + tag, Args: []string{"sleep", "infinity"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					"gpushare.io/gpu-mem": *k8sresource.NewQuantity(4096, k8sresource.DecimalSI)}}}},
		},
	}
	_, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// claimCheckPod is the demo's pod that asks its GPU through a
// ResourceClaim of the same name.
const claimCheckPod = "real-node-claim-check"

// createClaimCheckPod asks the real node for 3 GiB of one of gpushare's
// DRA devices, through a ResourceClaim, once gpushare-dra has published
// them with what the node's pods book.
func createClaimCheckPod(ctx context.Context, client kubernetes.Interface, tag string) error {
	if err := waitDevices(ctx, client); err != nil {
		return err
	}
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: claimCheckPod, Namespace: metav1.NamespaceDefault},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpushare.io", Capacity: &resourceapi.CapacityRequirements{
				Requests: map[resourceapi.QualifiedName]k8sresource.Quantity{"memory": k8sresource.MustParse("3Gi")}}}}}}}}
	if _, err := client.ResourceV1().ResourceClaims(rc.Namespace).Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		return err
	}
	name := claimCheckPod
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: claimCheckPod, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{corev1.LabelHostname: realNode.Name},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}},
			Containers: []corev1.Container{{Name: "main", Image: probeRef + ":" + tag, Args: []string{"sleep", "infinity"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		},
	}
	_, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// waitDevices waits up to a minute for the real node's ResourceSlice to
// list its GPUs, less the 4 GiB of the demo's other pod once it holds
// them.
func waitDevices(ctx context.Context, client kubernetes.Interface) error {
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pod, perr := client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, checkPod, metav1.GetOptions{})
		booked := perr == nil && pod.Annotations[gpusharev1.AllocationAnnotation] != ""
		for _, s := range list.Items {
			if s.Spec.NodeName == nil || *s.Spec.NodeName != realNode.Name || len(s.Spec.Devices) != realNode.Count {
				continue
			}
			var total int64
			for _, d := range s.Spec.Devices {
				q := d.Capacity["memory"].Value
				total += q.Value()
			}
			if !booked || total < int64(realNode.Count)*realNode.MemoryMiB<<20 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gpushare-dra published no ResourceSlice of %s's %d GPUs within a minute", realNode.Name, realNode.Count)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// printRealPods says which pods' containers really run: those on the
// real node, once they start (two minutes at most), and what the demo's
// own pod's container sees of its GPUs.
func printRealPods(ctx context.Context, c *controlplane.Cluster, client kubernetes.Interface) error {
	var pods []corev1.Pod
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + realNode.Name})
		if err != nil {
			return err
		}
		pods = list.Items
		starting := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodPending {
				starting++
			}
		}
		if starting == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	fmt.Printf("\nPods whose containers really run (node %s: kubelet, containerd, runc); the other nodes are kwok's and only pretend.\n", realNode.Name)
	fmt.Printf("What each running pod's first container sees (kubectl exec POD -- gpushare-probe report):\n")
	for _, p := range pods {
		if p.Namespace == metav1.NamespaceSystem {
			// The pod that only lends gpushare-node its token: the
			// daemon runs on the host (startRealNode).
			continue
		}
		var states []string
		for _, cs := range p.Status.ContainerStatuses {
			state := "waiting"
			switch {
			case cs.State.Running != nil:
				state = "running"
			case cs.State.Terminated != nil:
				state = "exited " + fmt.Sprint(cs.State.Terminated.ExitCode)
			case cs.State.Waiting != nil:
				state = cs.State.Waiting.Reason
			}
			states = append(states, cs.Name+" "+state)
		}
		fmt.Printf("    %-40s %-9s %s\n", p.Namespace+"/"+p.Name, p.Status.Phase, strings.Join(states, ", "))
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		seen, err := containerSees(ctx, c, p.Namespace, p.Name)
		if err != nil {
			seen = "(could not ask: " + err.Error() + ")"
		}
		fmt.Printf("        %s\n", seen)
	}
	return nil
}

// containerSees asks the probe in a pod's container for its GPU
// environment.
func containerSees(ctx context.Context, c *controlplane.Cluster, ns, name string) (string, error) {
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Tools.Bin("kubectl"), "--kubeconfig="+c.Kubeconfig, "-n", ns, "exec", name, "--",
		"gpushare-probe", "report")
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var report struct {
		Env     map[string]string `json:"env"`
		Devices []string          `json:"devices"`
	}
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		return "", err
	}
	var env []string
	for _, k := range []string{"NVIDIA_VISIBLE_DEVICES", "GPUSHARE_GPU_MEMORY_MIB"} {
		env = append(env, k+"="+report.Env[k])
	}
	var devices []string
	for _, d := range report.Devices {
		name, _, _ := strings.Cut(d, " ")
		devices = append(devices, "/dev/"+name)
	}
	env = append(env, "devices: "+strings.Join(devices, ","))
	return strings.Join(env, " "), nil
}

// serveImage serves the OCI layout dir as every image, on addr, until
// SIGTERM: the real node's image mirror.
func serveImage(addr, dir string) error {
	if addr == "" {
		return errors.New("serve-image needs --listen")
	}
	m, err := controlplane.ServeImage(dir, addr)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return m.Close()
}

// stopRealNode stops the demo's real node, if one runs from dir, private
// or not: its pods' containers, the kubelet and containerd, its mounts,
// and its kubelet directory. Another demo's real node is left alone.
func stopRealNode(dir string) error {
	for _, private := range []bool{false, true} {
		nodeDir := controlplane.RealNodeDir(private)
		if nodeDir == "" || !strings.HasPrefix(nodeDir, filepath.Clean(dir)+"/") {
			continue
		}
		fmt.Printf("stopping the real node %s: its pods' containers, the kubelet and containerd\n", realNode.Name)
		return controlplane.StopRealNode(private)
	}
	return nil
}
