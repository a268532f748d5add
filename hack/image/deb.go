package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// A deb is a Debian package pinned by version and checksum, so that an
// image built today and one built next year from the same commit hold
// the same bytes. Both come from Debian 12 (bookworm), whose glibc is the
// one gpushare-node is linked against on the build machine; an image's
// glibc must be at least as new as the build machine's. To move a pin:
// apt-get download NAME=VERSION; sha256sum NAME_*.deb.
type deb struct {
	name, version, arch, sha256 string
}

// The pinned packages.
var (
	libc6 = deb{
		name: "libc6", version: "2.36-9+deb12u14", arch: "amd64",
		sha256: "ba4f88f73dbc3ae9055f3c20f4523bfdbaf1ad13ff95e258924f77d20b4fbedf",
	}
	caCertificates = deb{
		name: "ca-certificates", version: "20230311+deb12u1", arch: "all",
		sha256: "0d5f444f594e48c1e16a41d8fc628a09b24c658916a1274025c2330f2a802bed",
	}
)

func (d deb) file() string { return fmt.Sprintf("%s_%s_%s.deb", d.name, d.version, d.arch) }

// fetch returns the path of the package in cache, downloading it with
// apt-get (from the machine's configured Debian archive, never a
// container registry) when it is not there yet.
func (d deb) fetch(ctx context.Context, logger *slog.Logger, cache string) (string, error) {
	dst := filepath.Join(cache, d.file())
	if err := d.verify(dst); err == nil {
		return dst, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, ".download-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	logger.Info("Downloading a Debian package", "package", d.name, "version", d.version)
	spec := d.name + "=" + d.version
	if d.arch != "all" {
		spec = d.name + ":" + d.arch + "=" + d.version
	}
	if _, err := output(ctx, tmp, "apt-get", "download", spec); err != nil {
		// A fresh machine may have no package lists yet.
		if os.Geteuid() != 0 {
			return "", fmt.Errorf("%w (run apt-get update first; if the archive no longer serves %s, move the pin in hack/image/deb.go)", err, spec)
		}
		logger.Info("Updating the package lists", "after", err)
		if _, err := output(ctx, tmp, "apt-get", "update"); err != nil {
			return "", err
		}
		if _, err := output(ctx, tmp, "apt-get", "download", spec); err != nil {
			return "", fmt.Errorf("%w (if the archive no longer serves %s, move the pin in hack/image/deb.go)", err, spec)
		}
	}
	got, err := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if err != nil || len(got) != 1 {
		return "", fmt.Errorf("apt-get download %s: want one .deb, got %q", spec, got)
	}
	if err := d.verify(got[0]); err != nil {
		return "", err
	}
	if err := os.Rename(got[0], dst); err != nil {
		return "", err
	}
	return dst, nil
}

// verify checks the package's checksum.
func (d deb) verify(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != d.sha256 {
		return fmt.Errorf("%s: sha256 %s, want %s", file, got, d.sha256)
	}
	return nil
}

// files reads the package's files whose path (relative, no leading
// slash) keep accepts, through dpkg-deb. Only directories, regular files
// and symbolic links are expected; their owner and times are dropped.
func files(ctx context.Context, file string, keep func(string) bool) (tree, error) {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", file)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dpkg-deb: %w", err)
	}
	t, readErr := readTar(stdout, keep)
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", file, err, strings.TrimSpace(stderr.String()))
	}
	if readErr != nil {
		return nil, fmt.Errorf("%s: %w", file, readErr)
	}
	return t, nil
}

func readTar(r io.Reader, keep func(string) bool) (tree, error) {
	t := tree{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if name == "" || !keep(name) {
			continue
		}
		mode := h.Mode & 0o7777
		switch h.Typeflag {
		case tar.TypeDir:
			t.add(name, &file{typ: tar.TypeDir, mode: mode})
		case tar.TypeSymlink:
			t.add(name, &file{typ: tar.TypeSymlink, mode: 0o777, link: h.Linkname})
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			t.add(name, &file{typ: tar.TypeReg, mode: mode, data: data})
		default:
			return nil, fmt.Errorf("%s: unexpected tar entry type %q", name, h.Typeflag)
		}
	}
}
