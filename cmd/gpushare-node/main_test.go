package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/record"
)

// TestWarnStale: a resource the daemon does not serve that the node still
// advertises (at capacity 0, as the kubelet leaves a device plugin
// resource gone) is logged once, with the command that removes it, and
// again only after it was gone and came back.
func TestWarnStale(t *testing.T) {
	var logged []string
	logger := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	check := warnStale(logger, map[string]error{"gpushare.io/gpu-mem": errors.New("too many devices")})
	node := func(capacity corev1.ResourceList) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0"}, Status: corev1.NodeStatus{Capacity: capacity}}
	}
	stale := node(corev1.ResourceList{"gpushare.io/gpu-mem": k8sresource.MustParse("0"), "aliyun.com/gpu-mem": k8sresource.MustParse("1128")})
	check(stale)
	check(stale)
	if len(logged) != 1 || !strings.Contains(logged[0], `"resource"="gpushare.io/gpu-mem"`) ||
		!strings.Contains(logged[0], `kubectl patch node gpu-0 --subresource=status --type=json -p '[{\"op\":\"remove\",\"path\":\"/status/capacity/gpushare.io~1gpu-mem\"}]'`) {
		t.Fatalf("logged %q; want one error naming gpushare.io/gpu-mem and the patch that removes it", logged)
	}
	check(node(corev1.ResourceList{"aliyun.com/gpu-mem": k8sresource.MustParse("1128")}))
	check(stale)
	if len(logged) != 2 {
		t.Errorf("logged %d times; want again once the resource came back", len(logged))
	}
}

// TestEnforcement: --enforcement checks what it needs; hami-core writes
// the preload list and a lock directory any container's user may write
// in, without removing what others wrote (sticky).
func TestEnforcement(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libvgpu.so")
	for _, c := range []struct {
		o    options
		want string
	}{
		{options{enforcement: "none"}, ""},
		{options{enforcement: "mps"}, "--enforcement=mps needs --mps"},
		{options{enforcement: "mps", mps: true}, ""},
		{options{enforcement: "strict"}, `--enforcement="strict": want one of`},
		{options{enforcement: "hami-core", hamiCoreLib: lib, hamiCoreDir: dir}, "--hami-core-library=" + lib + ": HAMi-core's library is not at " + lib},
	} {
		h, err := enforcement(c.o)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) || h != nil {
			t.Errorf("%+v: %v, %v; want %q", c.o, h, err, c.want)
		}
	}
	// A file there that is no HAMi-core library is refused.
	if err := os.WriteFile(lib, []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := enforcement(options{enforcement: "hami-core", hamiCoreLib: lib, hamiCoreDir: dir}); err == nil ||
		!strings.Contains(err.Error(), "is not a shared library") {
		t.Errorf("a file that is no library: %v", err)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("a C compiler builds the stand-in library (the project's cgo build needs one too): %v", err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, "../../pkg/deviceplugin/testdata/hamicore-standin.c").CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	h, err := enforcement(options{enforcement: "hami-core", hamiCoreLib: lib, hamiCoreDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(h.Preload); err != nil || string(b) != cdi.PreloadContent {
		t.Errorf("preload list %q (%v), want %q", b, err, cdi.PreloadContent)
	}
	if info, err := os.Stat(h.LockDir); err != nil || info.Mode().Perm() != 0o777 || info.Mode()&os.ModeSticky == 0 {
		t.Errorf("lock directory %v (%v), want drwxrwxrwt", info.Mode(), err)
	}
}

// TestStartedWith: a container is checked beside the pods that have run
// a container their record gives GPUs (running, ended, restarted, or
// started), and its own pod as the kubelet starts it; never beside a pod
// whose GPU containers have not started (perhaps one refused for coming
// after a claim, whose init container without GPUs ran), one without a
// record, nor its own pod's older copy.
func TestStartedWith(t *testing.T) {
	pod := func(name string, initState, mainState corev1.ContainerStatus) *corev1.Pod {
		value, err := gpusharev1.Marshal(&gpusharev1.Allocation{Node: "gpu-0", Containers: []gpusharev1.ContainerAllocation{{
			Name: "main", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{{Index: 0, UUID: "GPU-0", MemoryMiB: 1000}}}}})
		if err != nil {
			t.Fatal(err)
		}
		initState.Name, mainState.Name = "init", "main"
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name),
			Annotations: map[string]string{gpusharev1.AllocationAnnotation: value}},
			Spec: corev1.PodSpec{NodeName: "gpu-0"},
			Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{initState},
				ContainerStatuses: []corev1.ContainerStatus{mainState}}}
	}
	none := corev1.ContainerStatus{}
	ran := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}
	running := pod("running", ran, corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	ended := pod("ended", ran, ran)
	restarting := pod("restarting", ran, corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}})
	refused := pod("refused", ran, corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError"}}})
	admitted := pod("admitted", none, none)
	unrecorded := pod("unrecorded", ran, ran)
	unrecorded.Annotations = nil
	starting := pod("starting", none, none)
	old := running.DeepCopy()
	self := pod("running", ran, corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}})
	var names []string
	for _, p := range startedWith([]*corev1.Pod{running, ended, restarting, refused, admitted, unrecorded}, starting, record.Reader{}) {
		names = append(names, p.Name)
	}
	if want := []string{"starting", "running", "ended", "restarting"}; !slices.Equal(names, want) {
		t.Errorf("beside %v; want %v", names, want)
	}
	if got := startedWith([]*corev1.Pod{old, refused}, self, record.Reader{}); len(got) != 1 || got[0] != self {
		t.Errorf("a restarting container's pod: beside %v; want its own pod alone, as the kubelet starts it", got)
	}
}
