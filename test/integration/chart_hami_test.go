package integration

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
)

// TestChartHAMiValues: examples/hami/values.yaml, which install.md's
// "Moving over from HAMi" installs with, gives every component the built-in
// resources and HAMi's, leaves their groups to gpushare in
// kube-scheduler's resource fit, and runs gpushare-node with HAMi-core
// enforcement and its library mounted.
func TestChartHAMiValues(t *testing.T) {
	t.Parallel()
	out := helm(t, "template", "gpushare", chart, "--namespace", "kube-system", "--kube-version", "1.37",
		"-f", "examples/hami/values.yaml", "--set", "scheduler.replaceDefault=true")
	var args, sched string
	var daemon *appsv1.DaemonSet
	for _, obj := range decodeAll(t, out) {
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			switch o.Name {
			case "gpushare-args":
				args = o.Data["args.yaml"]
			case "gpushare-scheduler-config":
				sched = o.Data["scheduler-config.yaml"]
			}
		case *appsv1.DaemonSet:
			if o.Name == "gpushare-node" {
				daemon = o
			}
		}
	}
	a, err := v1alpha1.LoadArgs([]byte(args))
	if err != nil {
		t.Fatalf("the chart's GPUShareArgs: %v\n%s", err, args)
	}
	want := append(v1alpha1.DefaultResources(), v1alpha1.HAMiResources()...)
	if diff := cmp.Diff(want, a.ResourceModel.Resources); diff != "" {
		t.Errorf("resources (-built-in and HAMi's +examples/hami/values.yaml):\n%s", diff)
	}
	if !strings.Contains(sched, "ignoredResourceGroups: [gpushare.io, aliyun.com, elasticgpu.io, keti.com, nvidia.com]") {
		t.Errorf("kube-scheduler's resource fit does not leave nvidia.com to gpushare:\n%s", sched)
	}
	if daemon == nil {
		t.Fatal("no gpushare-node DaemonSet")
	}
	c := daemon.Spec.Template.Spec.Containers[0]
	if !strings.Contains(strings.Join(c.Args, " "), "--enforcement=hami-core --hami-core-library=/usr/local/vgpu/libvgpu.so") {
		t.Errorf("gpushare-node args %v", c.Args)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.MountPath == "/usr/local/vgpu" && m.ReadOnly)
	}
	if !mounted {
		t.Errorf("HAMi-core's library's directory is not mounted read-only: %v", c.VolumeMounts)
	}
	// The directory, not the file: HAMi installs libvgpu.so.<version>,
	// and a hostPath of type File that is not there keeps the pod from
	// starting before gpushare-node can say why.
	for _, v := range daemon.Spec.Template.Spec.Volumes {
		if v.Name == "hami-core-library" && (v.HostPath == nil || v.HostPath.Path != "/usr/local/vgpu" || v.HostPath.Type == nil ||
			*v.HostPath.Type != corev1.HostPathDirectoryOrCreate) {
			t.Errorf("volume hami-core-library: %+v; want the hostPath directory /usr/local/vgpu, DirectoryOrCreate", v.VolumeSource)
		}
	}
}
