package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestImages builds every image twice from the checkout, wants the same
// digests both times, then unpacks each image's root filesystem and runs
// its entrypoint with --version in it (chroot), so that a missing library,
// a wrong entrypoint or a binary its user may not run fails here rather
// than on a cluster. It needs root, or unprivileged user namespaces.
func TestImages(t *testing.T) {
	ctx := t.Context()
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	var o options
	if err := o.complete(ctx); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	var builds [2][]built
	for i := range builds {
		o.out = filepath.Join(tmp, strconv.Itoa(i))
		var err error
		if builds[i], err = build(ctx, logger, o); err != nil {
			t.Fatalf("build %d: %v", i+1, err)
		}
	}
	// A registry to push to, as crane push does: the digest it reports
	// must be the built one.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	for i, b := range builds[0] {
		t.Run(b.name, func(t *testing.T) {
			img := readLayout(t, b, o.version)
			push(t, img, host+"/gpushare/"+b.name+":"+o.version)
			if again := builds[1][i]; again.digest != b.digest {
				t.Errorf("digest %s, then %s from the same commit: the build is not reproducible\n%s",
					b.digest, again.digest, manifestDiff(t, img, readLayout(t, again, o.version)))
			}
			spec, _ := specFor(b.name)
			checkConfig(t, img, spec, o)
			root := unpack(t, img)
			if !spec.cgo {
				checkOnly(t, root, spec)
			}
			runVersion(t, root, img, spec, o)
		})
	}
}

// readLayout reads the built layout back, as crane push or skopeo would,
// and checks the image in it.
func readLayout(t *testing.T, b built, tag string) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(b.layout)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%s: %d manifests, want 1", b.layout, len(m.Manifests))
	}
	desc := m.Manifests[0]
	if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != tag {
		t.Errorf("%s: ref.name %q, want %q", b.layout, got, tag)
	}
	if desc.Digest != b.digest {
		t.Errorf("%s: digest %s, want the built %s", b.layout, desc.Digest, b.digest)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("%s: %v", b.layout, err)
	}
	return img
}

// push writes img to the registry as ref and wants the registry to
// serve it under the same digest.
func push(t *testing.T, img v1.Image, ref string) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	desc, err := remote.Head(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want {
		t.Errorf("pushed %s as %s, want %s", ref, desc.Digest, want)
	}
}

// manifestDiff says which of two images' blobs differ.
func manifestDiff(t *testing.T, a, b v1.Image) string {
	t.Helper()
	ma, err := a.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	mb, err := b.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if ma.Config.Digest != mb.Config.Digest {
		fmt.Fprintf(&out, "config %s != %s\n", ma.Config.Digest, mb.Config.Digest)
	}
	for i := range min(len(ma.Layers), len(mb.Layers)) {
		if ma.Layers[i].Digest != mb.Layers[i].Digest {
			fmt.Fprintf(&out, "layer %d: %s != %s\n", i, ma.Layers[i].Digest, mb.Layers[i].Digest)
		}
	}
	return out.String()
}

func checkConfig(t *testing.T, img v1.Image, spec imageSpec, o options) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != spec.user {
		t.Errorf("user %q, want %q", cf.Config.User, spec.user)
	}
	if !cf.Created.Equal(o.created) {
		t.Errorf("created %v, want the commit's time %v", cf.Created.Time, o.created)
	}
	entry := []string{"/usr/local/bin/" + spec.name}
	if !slices.Equal(cf.Config.Entrypoint, entry) {
		t.Errorf("entrypoint %q, want %q", cf.Config.Entrypoint, entry)
	}
	want := map[string]string{
		"org.opencontainers.image.title":    spec.name,
		"org.opencontainers.image.source":   "https://github.com/gpushare/gpushare",
		"org.opencontainers.image.revision": o.commit,
		"org.opencontainers.image.version":  o.version,
	}
	for k, v := range want {
		if got := cf.Config.Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}
	if cf.Config.Labels["org.opencontainers.image.description"] == "" {
		t.Error("no org.opencontainers.image.description label")
	}
}

// unpack writes the image's root filesystem, all its layers applied, to
// a new directory.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	// Others than root walk through it once it is their /.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		name := path.Clean(h.Name)
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			t.Fatalf("layer entry %q escapes the root", h.Name)
		}
		dst := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := h.FileInfo().Mode() & (os.ModePerm | os.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
			if err == nil {
				err = os.Chmod(dst, mode)
			}
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(dst, data, mode)
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, dst)
		default:
			err = fmt.Errorf("unexpected type %q", h.Typeflag)
		}
		if err != nil {
			t.Fatalf("unpacking %s: %v", h.Name, err)
		}
	}
}

// checkOnly wants a static image to hold its binary, the CA
// certificates, passwd and group, and nothing else.
func checkOnly(t *testing.T, root string, spec imageSpec) {
	t.Helper()
	var got []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		got = append(got, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"etc/group",
		"etc/passwd",
		"etc/ssl/certs/ca-certificates.crt",
	}
	bins := append([]string{spec.name}, spec.also...)
	slices.Sort(bins)
	for _, b := range bins {
		want = append(want, "usr/local/bin/"+b)
	}
	want = append(want, "usr/share/doc/ca-certificates/copyright")
	if !slices.Equal(got, want) {
		t.Errorf("files %q, want %q", got, want)
	}
}

// runVersion runs the entrypoint, and each command the image holds
// beside it, with --version, chrooted into root, as the image's user, and
// wants the build's version and commit back.
func runVersion(t *testing.T, root string, img v1.Image, spec imageSpec, o options) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.Config.Entrypoint) == 0 {
		t.Fatal("no entrypoint")
	}
	runVersionOf(t, root, cf, cf.Config.Entrypoint[0], spec.name, o)
	for _, a := range spec.also {
		runVersionOf(t, root, cf, "/"+binDir+"/"+a, a, o)
	}
}

// runVersionOf runs entry --version in the image and wants name's line.
func runVersionOf(t *testing.T, root string, cf *v1.ConfigFile, entry, name string, o options) {
	t.Helper()
	cmd := exec.Command(entry, "--version")
	// Path is looked up after the chroot, inside the image.
	cmd.Path = entry
	cmd.Env = cf.Config.Env
	cmd.Dir = "/"
	attr := &syscall.SysProcAttr{Chroot: root}
	if os.Geteuid() == 0 {
		uid, gid := parseUser(t, cf.Config.User)
		attr.Credential = &syscall.Credential{Uid: uid, Gid: gid}
	} else {
		// As root of a user namespace of our own, which may chroot.
		attr.Cloneflags = syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	cmd.SysProcAttr = attr
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		as := cf.Config.User
		if os.Geteuid() != 0 {
			as = "root of a new user namespace (not being root)"
			if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOSPC) {
				as += "; if this machine refuses user namespaces, run the test as root, or allow them " +
					"(sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone)"
			}
		}
		t.Fatalf("%s --version, chrooted into the image as %s: %v\nstdout: %s\nstderr: %s\n%s",
			entry, as, err, stdout.String(), stderr.String(), missing(root, entry))
	}
	out := stdout.String()
	for _, want := range []string{name + " " + o.version + " ", "commit " + o.commit[:12]} {
		if !strings.Contains(out, want) {
			t.Errorf("%s --version printed %q, want it to hold %q", entry, out, want)
		}
	}
	t.Logf("%s", strings.TrimSpace(out))
}

func parseUser(t *testing.T, user string) (uid, gid uint32) {
	t.Helper()
	u, g, ok := strings.Cut(user, ":")
	un, err1 := strconv.ParseUint(u, 10, 32)
	gn, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("user %q: want UID:GID", user)
	}
	return uint32(un), uint32(gn)
}

// missing explains a binary that would not start: the files its ELF
// header asks for that the image lacks.
func missing(root, entry string) string {
	f, err := elf.Open(filepath.Join(root, entry))
	if err != nil {
		return fmt.Sprintf("the entrypoint: %v", err)
	}
	defer func() { _ = f.Close() }()
	var lacks []string
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		interp, _ := io.ReadAll(p.Open())
		name := strings.TrimRight(string(interp), "\x00")
		if _, err := os.Stat(filepath.Join(root, name)); err != nil {
			lacks = append(lacks, "the loader "+name)
		}
	}
	libs, _ := f.ImportedLibraries()
	for _, lib := range libs {
		found := false
		for _, dir := range []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "lib", "usr/lib"} {
			if _, err := os.Stat(filepath.Join(root, dir, lib)); err == nil {
				found = true
				break
			}
		}
		if !found {
			lacks = append(lacks, lib)
		}
	}
	if len(lacks) == 0 {
		return "the image has the loader and libraries the entrypoint asks for"
	}
	return "the image lacks: " + strings.Join(lacks, ", ")
}
