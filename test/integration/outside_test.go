package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// outside runs a container of an installed pod as a process on this
// machine, since kwok runs no containers: its args as the pod has them,
// $(VAR)s expanded from its environment, and each volume mount's path
// replaced by a local directory that holds what the volume holds (the
// ConfigMaps and Secrets read from the cluster). The process gets a
// kubeconfig with a token of the pod's service account bound to the pod:
// the credentials the kubelet would give it.
type outside struct {
	pod        *corev1.Pod
	container  corev1.Container
	dir        string
	mounts     map[string]string // mountPath -> local path
	kubeconfig string
}

// runOutside prepares the pod's container named name.
func runOutside(t *testing.T, c *controlplane.Cluster, client kubernetes.Interface, pod *corev1.Pod, name string) *outside {
	t.Helper()
	ctx := context.Background()
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("pod %s/%s has no container %s", pod.Namespace, pod.Name, name)
	}
	o := &outside{pod: pod, container: pod.Spec.Containers[i], dir: t.TempDir(), mounts: map[string]string{}}
	volumes := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		local := filepath.Join(o.dir, v.Name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			t.Fatal(err)
		}
		volumes[v.Name] = local
		files := map[string][]byte{}
		switch {
		case v.ConfigMap != nil:
			cm, err := client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("volume %s: %v", v.Name, err)
			}
			for k, d := range cm.Data {
				files[k] = []byte(d)
			}
		case v.Secret != nil:
			s, err := client.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("volume %s: %v", v.Name, err)
			}
			for k, d := range s.Data {
				files[k] = d
			}
		}
		for k, d := range files {
			if err := os.WriteFile(filepath.Join(local, k), d, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range o.container.VolumeMounts {
		local, ok := volumes[m.Name]
		if !ok {
			t.Fatalf("container %s mounts volume %s, which the pod lacks", name, m.Name)
		}
		o.mounts[m.MountPath] = filepath.Join(local, m.SubPath)
	}
	var err error
	o.kubeconfig, err = c.AccountKubeconfig(ctx, pod.Namespace, pod.Spec.ServiceAccountName, pod, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// args returns the container's args with $(VAR) expanded (status.podIP is
// 127.0.0.1, where the process listens) and mount paths made local.
func (o *outside) args(t *testing.T) []string {
	t.Helper()
	env := map[string]string{}
	for _, e := range o.container.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = o.pod.Spec.NodeName
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			env[e.Name] = "127.0.0.1"
		default:
			t.Fatalf("container %s: env %s from %+v: not simulated", o.container.Name, e.Name, e.ValueFrom)
		}
	}
	paths := make([]string, 0, len(o.mounts))
	for p := range o.mounts {
		paths = append(paths, p)
	}
	// Longest first: /etc/gpushare/tls before /etc/gpushare.
	slices.SortFunc(paths, func(a, b string) int { return len(b) - len(a) })
	out := make([]string, 0, len(o.container.Args))
	for _, a := range append(slices.Clone(o.container.Command), o.container.Args...) {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		for _, p := range paths {
			if strings.Contains(a, p) {
				a = strings.ReplaceAll(a, p, o.mounts[p])
				break
			}
		}
		out = append(out, a)
	}
	return out
}

// local returns the local path of a path inside the container.
func (o *outside) local(t *testing.T, path string) string {
	t.Helper()
	for p, l := range o.mounts {
		if rest, ok := strings.CutPrefix(path, p); ok {
			return l + rest
		}
	}
	t.Fatalf("%s is on no volume of container %s", path, o.container.Name)
	return ""
}
