package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/cdi"
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
