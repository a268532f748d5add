package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// A tree is the files of one layer by path, relative to the root and
// without a leading slash.
type tree map[string]*file

// A file is a directory, a regular file or a symbolic link. Every file
// belongs to root: nothing in the images needs to be written by their
// user.
type file struct {
	typ  byte  // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	mode int64 // permission bits, with the sticky bit
	data []byte
	link string
}

// add puts f at name, and a directory (0755) at each missing parent.
// A later file at the same path replaces an earlier one.
func (t tree) add(name string, f *file) {
	t[name] = f
	for dir := path.Dir(name); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if _, ok := t[dir]; ok {
			break
		}
		t[dir] = &file{typ: tar.TypeDir, mode: 0o755}
	}
}

// merge adds every file of other.
func (t tree) merge(other tree) {
	for name, f := range other {
		t.add(name, f)
	}
}

// tar writes the tree as a tar archive that depends on nothing but the
// tree and mtime: entries sorted by path, owner 0:0 with no names, every
// time mtime.
func (t tree) tar(w io.Writer, mtime time.Time) error {
	names := make([]string, 0, len(t))
	for name := range t {
		names = append(names, name)
	}
	slices.Sort(names)
	tw := tar.NewWriter(w)
	for _, name := range names {
		f := t[name]
		h := &tar.Header{
			Typeflag: f.typ,
			Name:     name,
			Mode:     f.mode,
			ModTime:  mtime,
			Format:   tar.FormatPAX,
		}
		switch f.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = f.link
		case tar.TypeReg:
			h.Size = int64(len(f.data))
		default:
			return fmt.Errorf("%s: unexpected type %q", name, f.typ)
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return tw.Close()
}

// layer returns the tree as a gzip-compressed OCI layer. Go's gzip
// writer sets no name and no time in its header, so the layer's digest
// depends only on the tree, mtime and the Go release's compressor.
func (t tree) layer(mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if err := t.tar(zw, mtime); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	blob := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
