package integration

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// krewPlugin is what TestChartRelease reads of a krew manifest.
type krewPlugin struct {
	Spec struct {
		Version   string `json:"version"`
		Platforms []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestChartRelease: `make release VERSION=...` (hack/release.sh) packages
// the chart with version and appVersion VERSION, so that by default it
// runs the images `make images VERSION=...` tags, and builds the kubectl
// plugin's archives, each with a sha256 file that sha256sum -c reads,
// and a krew manifest naming VERSION and the archives' sha256. Versions
// that are not vX.Y.Z are refused. The images are left out here (make
// image-test builds them) and the plugin is built for this machine's
// platform only, from the krew manifest cut down to it.
func TestChartRelease(t *testing.T) {
	t.Parallel()
	const version = "v1.2.3"
	raw := readFile(t, "cmd/kubectl-inspect-gpushare/plugin.yaml")
	var plugin krewPlugin
	if err := yaml.Unmarshal(raw, &plugin); err != nil {
		t.Fatal(err)
	}
	// Each platform's archive is named for its selector: the release
	// builds the archive for the platform its name says.
	for _, p := range plugin.Spec.Platforms {
		want := fmt.Sprintf("/kubectl-inspect-gpushare_%s_%s.tar.gz", p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"])
		if !strings.HasSuffix(p.URI, want) || p.Bin != "kubectl-inspect-gpushare" {
			t.Errorf("krew manifest: platform %v has uri %s, bin %s; want an archive ending %s with bin kubectl-inspect-gpushare", p.Selector.MatchLabels, p.URI, p.Bin, want)
		}
	}
	archive := fmt.Sprintf("kubectl-inspect-gpushare_%s_%s.tar.gz", runtime.GOOS, runtime.GOARCH)
	head, rest, _ := strings.Cut(string(raw), "  - selector:")
	var cut string
	for _, block := range strings.Split(rest, "  - selector:") {
		if strings.Contains(block, "/"+archive) {
			cut = head + "  - selector:" + block
		}
	}
	if cut == "" {
		t.Skipf("the krew manifest has no archive for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	dir := t.TempDir()
	manifest := filepath.Join(dir, "plugin.yaml")
	if err := os.WriteFile(manifest, []byte(cut), 0o600); err != nil {
		t.Fatal(err)
	}
	release := func(version, out string) ([]byte, error) {
		cmd := exec.Command(filepath.Join(root, "hack/release.sh"), version, out)
		cmd.Dir = root
		// A test runs on a tree with changes; the release of one is
		// refused unless RELEASE_DIRTY says otherwise.
		cmd.Env = append(os.Environ(), "HELM="+helmBin(t), "RELEASE_IMAGES=0", "RELEASE_DIRTY=1", "KREW_MANIFEST="+manifest,
			"HELM_CONFIG_HOME="+dir, "HELM_CACHE_HOME="+dir, "HELM_DATA_HOME="+dir)
		return cmd.CombinedOutput()
	}
	for _, bad := range []string{"1.2.3", "v1.2", "latest"} {
		if out, err := release(bad, filepath.Join(dir, "bad")); err == nil || !strings.Contains(string(out), "is not vX.Y.Z") {
			t.Errorf("hack/release.sh %s: %v\n%s; want it refused", bad, err, out)
		}
	}
	mk := exec.Command("make", "-s", "release", "HELM="+helmBin(t))
	mk.Dir = root
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "VERSION=") {
			mk.Env = append(mk.Env, e)
		}
	}
	if out, err := mk.CombinedOutput(); err == nil || !strings.Contains(string(out), "make release needs VERSION=vX.Y.Z") {
		t.Errorf("make release without VERSION: %v\n%s; want it refused", err, out)
	}

	// From a fresh machine: make release builds the pinned helm before
	// it packages the chart (a dry run, into an empty tools cache).
	dry := exec.Command("make", "-n", "release", "VERSION="+version, "TOOLS_DIR="+filepath.Join(dir, "tools"))
	dry.Dir = root
	plan, err := dry.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n release: %v\n%s", err, plan)
	}
	build, run := strings.Index(string(plan), "helm.sh/helm/v4/cmd/helm"), strings.Index(string(plan), "hack/release.sh "+version)
	if build < 0 || run < build {
		t.Errorf("make -n release into an empty tools cache:\n%s\nwant helm built before hack/release.sh runs", plan)
	}

	out := filepath.Join(dir, "release")
	if b, err := release(version, out); err != nil {
		t.Fatalf("hack/release.sh %s: %v\n%s", version, err, b)
	}

	// The chart: version X.Y.Z, appVersion VERSION, and so every image
	// tagged VERSION.
	tgz := filepath.Join(out, "gpushare-"+strings.TrimPrefix(version, "v")+".tgz")
	var chartMeta struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(helm(t, "show", "chart", tgz), &chartMeta); err != nil {
		t.Fatal(err)
	}
	if chartMeta.Version != strings.TrimPrefix(version, "v") || chartMeta.AppVersion != version {
		t.Errorf("packaged chart: version %q, appVersion %q; want %q and %q", chartMeta.Version, chartMeta.AppVersion, strings.TrimPrefix(version, "v"), version)
	}
	for _, set := range [][]string{nil, {"--set", "mode=extender"}} {
		images := 0
		for _, obj := range decodeAll(t, helm(t, append([]string{"template", "gpushare", tgz}, set...)...)) {
			var spec *corev1.PodSpec
			switch o := obj.(type) {
			case *appsv1.Deployment:
				spec = &o.Spec.Template.Spec
			case *appsv1.DaemonSet:
				spec = &o.Spec.Template.Spec
			default:
				continue
			}
			for _, c := range spec.Containers {
				images++
				if !strings.HasSuffix(c.Image, ":"+version) {
					t.Errorf("the packaged chart runs %s; want the tag %s", c.Image, version)
				}
			}
		}
		if images < 2 {
			t.Errorf("the packaged chart (%v) runs %d images", set, images)
		}
	}

	// The plugin's archive and its sha256 file.
	data, err := os.ReadFile(filepath.Join(out, archive))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if got, want := string(readAbs(t, filepath.Join(out, archive+".sha256"))), hex.EncodeToString(sum[:])+"  "+archive+"\n"; got != want {
		t.Errorf("%s.sha256 is %q; want %q", archive, got, want)
	}
	bin := filepath.Join(dir, "kubectl-inspect-gpushare")
	if err := extract(filepath.Join(out, archive), "kubectl-inspect-gpushare", bin); err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	if b, err := exec.Command(bin, "--version").CombinedOutput(); err != nil || !strings.Contains(string(b), version) {
		t.Errorf("kubectl-inspect-gpushare --version from %s: %v, %q; want %s", archive, err, b, version)
	}

	// The krew manifest names the version and the archive's sha256, and
	// no longer says to install from source.
	var filled krewPlugin
	filledRaw := readAbs(t, filepath.Join(out, "inspect-gpushare.yaml"))
	if strings.Contains(string(filledRaw), "install from source") {
		t.Errorf("inspect-gpushare.yaml still says to install from source:\n%s", filledRaw)
	}
	if err := yaml.Unmarshal(filledRaw, &filled); err != nil {
		t.Fatal(err)
	}
	if filled.Spec.Version != version || len(filled.Spec.Platforms) != 1 {
		t.Fatalf("inspect-gpushare.yaml: version %q, %d platforms; want %s and 1", filled.Spec.Version, len(filled.Spec.Platforms), version)
	}
	p := filled.Spec.Platforms[0]
	if !strings.HasSuffix(p.URI, "/download/"+version+"/"+archive) || p.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("inspect-gpushare.yaml: uri %s, sha256 %s; want .../download/%s/%s and %x", p.URI, p.SHA256, version, archive, sum)
	}
}

func readAbs(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// extract writes the one file of the gzipped tar archive, which must be
// name and executable, to dst.
func extract(archive, name, dst string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	z, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	r := tar.NewReader(z)
	h, err := r.Next()
	if err != nil {
		return err
	}
	if h.Name != name || h.Mode&0o111 == 0 {
		return fmt.Errorf("holds %s (mode %o); want %s, executable", h.Name, h.Mode, name)
	}
	w, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o700)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("holds more than %s", name)
	}
	return nil
}
