package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where the images' binaries are, and what the images are published as.
const (
	binDir     = "usr/local/bin"
	repository = "ghcr.io/gpushare"
	source     = "https://github.com/gpushare/gpushare"
	nonroot    = "65532:65532"
	pathEnv    = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
)

// An imageSpec says what goes into one image.
type imageSpec struct {
	// name is the command's and the image's.
	name string
	// cgo builds the command with cgo, and puts glibc in the image.
	cgo         bool
	user        string
	env         []string
	description string
	// pkg is the command's package; ./cmd/<name> if empty.
	pkg string
	// links are paths in the image that link to the command, which
	// tells by its name what to do.
	links []string
	// also are more commands (./cmd/<name>) the image holds beside its
	// own, built the same way.
	also []string
	// test marks an image only the tests build and run: not released,
	// not built unless named.
	test bool
}

// pkgOf is the package of s's command.
func (s imageSpec) pkgOf() string {
	if s.pkg != "" {
		return s.pkg
	}
	return "./cmd/" + s.name
}

func specs() []imageSpec {
	return []imageSpec{{
		name:        "gpushare-scheduler",
		user:        nonroot,
		env:         []string{pathEnv},
		description: "kube-scheduler with gpushare's GPUShare plugin",
	}, {
		name: "gpushare-extender",
		user: nonroot,
		env:  []string{pathEnv},
		// gpushare-webhook, the GPU quota webhook (quota.enabled), runs
		// from this image too.
		also:        []string{"gpushare-webhook"},
		description: "gpushare's HTTP scheduler extender for stock kube-scheduler; gpushare-webhook, its GPU quota webhook",
	}, {
		// gpushare-node runs as root: it creates the device plugin
		// sockets in the kubelet's directory and CDI specs, both host
		// paths that only root may write, and with --mps it runs the
		// MPS control daemon. It is built with cgo because go-nvml
		// dlopens libnvidia-ml.so.1, which the NVIDIA container toolkit
		// injects from the host driver; both need the image's glibc.
		// NVIDIA_VISIBLE_DEVICES=all asks the toolkit for every GPU
		// and NVML (the daemon watches them all, so it takes none as a
		// resource); a DaemonSet that runs it with --mps adds compute to
		// NVIDIA_DRIVER_CAPABILITIES, for nvidia-cuda-mps-control.
		name: "gpushare-node",
		cgo:  true,
		user: "0:0",
		env: []string{
			pathEnv,
			"NVIDIA_VISIBLE_DEVICES=all",
			"NVIDIA_DRIVER_CAPABILITIES=utility",
		},
		// gpushare-dra, the DRA driver, runs from this image as a
		// second container of the node daemon's pod (dra.enabled).
		also: []string{"gpushare-dra"},
		description: "gpushare's node daemon: GPU inventory and kubelet device plugins; gpushare-dra, its DRA driver. " +
			"Runs as root: it writes device plugin sockets and CDI specs under host paths",
	}, {
		// The real-node tests' workload and pod sandbox (test/gpushare-probe):
		// it stands in for the seed examples' images, whose commands
		// (sleep, true) link to it, and reports what a container sees
		// of its GPUs.
		name:        "gpushare-probe",
		pkg:         "./test/gpushare-probe",
		user:        "0:0",
		env:         []string{pathEnv},
		links:       []string{"bin/sleep", "bin/true", "bin/sh", "bin/bash"},
		test:        true,
		description: "gpushare's test workload: reports the GPUs a container sees",
	}}
}

// imageNames are the images built by default: those released.
func imageNames() []string {
	var names []string
	for _, s := range specs() {
		if !s.test {
			names = append(names, s.name)
		}
	}
	return names
}

func specFor(name string) (imageSpec, bool) {
	for _, s := range specs() {
		if s.name == name {
			return s, true
		}
	}
	return imageSpec{}, false
}

// A built image.
type built struct {
	name   string
	layout string  // the OCI layout directory
	ref    string  // what it is meant to be pushed as
	digest v1.Hash // the manifest's
	size   int64   // of its compressed layers and config
}

// build builds the binaries and assembles the images o names.
func build(ctx context.Context, logger *slog.Logger, o options) ([]built, error) {
	var want []imageSpec
	glibc := false
	for _, name := range o.images {
		s, _ := specFor(name)
		want = append(want, s)
		glibc = glibc || s.cgo
	}
	bases, err := baseTrees(ctx, logger, o.cache, glibc)
	if err != nil {
		return nil, err
	}
	bins, err := os.MkdirTemp("", "gpushare-image-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(bins) }()
	if err := buildBinaries(ctx, logger, o, want, bins); err != nil {
		return nil, err
	}
	// The base layers are shared: assembled once, stored once per layout.
	baseLayers := map[bool]v1.Layer{}
	var out []built
	for _, s := range want {
		base, ok := baseLayers[s.cgo]
		if !ok {
			if base, err = bases[s.cgo].layer(o.created); err != nil {
				return nil, fmt.Errorf("base layer: %w", err)
			}
			baseLayers[s.cgo] = base
		}
		b, err := assemble(o, s, base, bins)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		logger.Info("Built image", "image", s.name, "layout", b.layout, "ref", b.ref, "digest", b.digest.String(), "bytes", b.size)
		out = append(out, b)
	}
	return out, nil
}

// baseTrees returns the files under each image's binary: for static
// binaries (false) the CA certificates, /etc/passwd and /etc/group and
// /tmp; for cgo binaries (true) glibc as well.
func baseTrees(ctx context.Context, logger *slog.Logger, cache string, glibc bool) (map[bool]tree, error) {
	certDeb, err := caCertificates.fetch(ctx, logger, cache)
	if err != nil {
		return nil, err
	}
	certs, err := files(ctx, certDeb, func(name string) bool {
		return strings.HasPrefix(name, "usr/share/ca-certificates/mozilla/") && strings.HasSuffix(name, ".crt") ||
			name == "usr/share/doc/ca-certificates/copyright"
	})
	if err != nil {
		return nil, err
	}
	static := tree{}
	// One bundle where Go (crypto/x509) and most TLS libraries look, as
	// update-ca-certificates would write it: every certificate, in
	// order of file name.
	var bundle bytes.Buffer
	for _, name := range sortedNames(certs) {
		f := certs[name]
		if f.typ != tar.TypeReg {
			continue
		}
		if name == "usr/share/doc/ca-certificates/copyright" {
			static.add(name, f)
			continue
		}
		bundle.Write(f.data)
		if !bytes.HasSuffix(f.data, []byte("\n")) {
			bundle.WriteByte('\n')
		}
	}
	if bundle.Len() == 0 {
		return nil, fmt.Errorf("%s: no certificates", certDeb)
	}
	static.add("etc/ssl/certs/ca-certificates.crt", &file{typ: tar.TypeReg, mode: 0o644, data: bundle.Bytes()})
	static.add("etc/passwd", &file{typ: tar.TypeReg, mode: 0o644, data: []byte(
		"root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")})
	static.add("etc/group", &file{typ: tar.TypeReg, mode: 0o644, data: []byte(
		"root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n")})
	static.add("tmp", &file{typ: tar.TypeDir, mode: 0o1777})
	bases := map[bool]tree{false: static}
	if !glibc {
		return bases, nil
	}
	libcDeb, err := libc6.fetch(ctx, logger, cache)
	if err != nil {
		return nil, err
	}
	// The shared libraries, the loader and its search path; not gconv's
	// iconv modules, locales or the rest of /usr/share.
	libc, err := files(ctx, libcDeb, func(name string) bool {
		return strings.HasPrefix(name, "lib/") || strings.HasPrefix(name, "lib64/") ||
			strings.HasPrefix(name, "etc/ld.so.conf.d/") || name == "usr/share/doc/libc6/copyright"
	})
	if err != nil {
		return nil, err
	}
	for _, need := range []string{"lib/x86_64-linux-gnu/libc.so.6", "lib64/ld-linux-x86-64.so.2"} {
		if _, ok := libc[need]; !ok {
			return nil, fmt.Errorf("%s: no %s", libcDeb, need)
		}
	}
	withLibc := tree{}
	withLibc.merge(static)
	withLibc.merge(libc)
	// libc-bin's one line, so that an ldconfig run in the container (the
	// NVIDIA container toolkit runs one after injecting the driver's
	// libraries) reads ld.so.conf.d.
	withLibc.add("etc/ld.so.conf", &file{typ: tar.TypeReg, mode: 0o644, data: []byte("include /etc/ld.so.conf.d/*.conf\n")})
	bases[true] = withLibc
	return bases, nil
}

func sortedNames(t tree) []string {
	names := make([]string, 0, len(t))
	for name := range t {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// assemble makes the image of s from its base layer and its binaries in
// bins, and writes it as an OCI layout under o.out, replacing any earlier
// one.
func assemble(o options, s imageSpec, base v1.Layer, bins string) (built, error) {
	bin := tree{}
	for _, name := range append([]string{s.name}, s.also...) {
		data, err := os.ReadFile(filepath.Join(bins, name))
		if err != nil {
			return built{}, err
		}
		bin.add(binDir+"/"+name, &file{typ: tar.TypeReg, mode: 0o755, data: data})
	}
	for _, l := range s.links {
		bin.add(l, &file{typ: tar.TypeSymlink, mode: 0o777, link: "/" + binDir + "/" + s.name})
	}
	top, err := bin.layer(o.created)
	if err != nil {
		return built{}, fmt.Errorf("binary layer: %w", err)
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       s.name,
		"org.opencontainers.image.description": s.description,
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.url":         source,
		"org.opencontainers.image.revision":    o.commit,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
	}
	cfg := &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: o.created},
		Config: v1.Config{
			User:       s.user,
			Entrypoint: []string{"/" + binDir + "/" + s.name},
			Env:        s.env,
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return built{}, err
	}
	history := func(what string) v1.History {
		return v1.History{Created: v1.Time{Time: o.created}, CreatedBy: "gpushare hack/image: " + what, Comment: s.name}
	}
	baseWhat := "CA certificates, passwd, group, /tmp"
	if s.cgo {
		baseWhat += ", glibc " + libc6.version
	}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: history(baseWhat)},
		mutate.Addendum{Layer: top, History: history("/" + binDir + "/" + s.name)},
	)
	if err != nil {
		return built{}, err
	}
	b := built{name: s.name, ref: repository + "/" + s.name + ":" + o.version}
	if b.digest, err = img.Digest(); err != nil {
		return built{}, err
	}
	if b.size, err = size(img); err != nil {
		return built{}, err
	}
	if b.layout, err = writeLayout(o.out, s.name, img, b.ref); err != nil {
		return built{}, err
	}
	return b, nil
}

// size is what pushing img uploads: its config and compressed layers.
func size(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// writeLayout writes img as the OCI layout dir/name, its one manifest
// annotated with ref's tag, as skopeo's oci:DIR:TAG expects.
func writeLayout(dir, name string, img v1.Image, ref string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "."+name+"-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return "", err
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	if err := p.AppendImage(img,
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}),
		layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag}),
	); err != nil {
		return "", fmt.Errorf("writing the OCI layout: %w", err)
	}
	// Readable by all, like the rest of bin/: MkdirTemp made the
	// directory 0700, and the layout's blobs come out 0600.
	err = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	})
	if err != nil {
		return "", err
	}
	final := filepath.Join(dir, name)
	if err := os.RemoveAll(final); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	return final, nil
}
