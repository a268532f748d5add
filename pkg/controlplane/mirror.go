package controlplane

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A Mirror is a read-only registry (the distribution API's pull half) on
// loopback that answers every repository and tag with one image, an OCI
// layout's: a real node pulls the seed examples' images (busybox,
// nvidia/cuda, ...) from it, unchanged, and gets the test workload.
type Mirror struct {
	// Host is host:port, for containerd's hosts.toml.
	Host string

	layout   string
	manifest string // digest of the layout's one manifest
	media    string
	server   *http.Server
}

// ServeImage starts a Mirror of the OCI layout dir, which must hold one
// manifest, on addr (host:port; "" for a free port on 127.0.0.1).
func ServeImage(dir, addr string) (*Mirror, error) {
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, err
	}
	var index struct {
		Manifests []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(b, &index); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if len(index.Manifests) != 1 {
		return nil, fmt.Errorf("%s: %d manifests, want 1", dir, len(index.Manifests))
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	m := &Mirror{Host: l.Addr().String(), layout: dir,
		manifest: index.Manifests[0].Digest, media: index.Manifests[0].MediaType}
	m.server = &http.Server{Handler: m}
	go func() { _ = m.server.Serve(l) }()
	return m, nil
}

// Close stops the mirror.
func (m *Mirror) Close() error { return m.server.Close() }

var (
	manifestPath = regexp.MustCompile(`^/v2/.+/manifests/[^/]+$`)
	blobPath     = regexp.MustCompile(`^/v2/.+/blobs/(sha256:[0-9a-f]{64})$`)
)

func (m *Mirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "read-only", http.StatusMethodNotAllowed)
		return
	}
	switch {
	case r.URL.Path == "/v2/" || r.URL.Path == "/v2":
		w.WriteHeader(http.StatusOK)
	case manifestPath.MatchString(r.URL.Path):
		m.blob(w, r, m.manifest, m.media)
	case blobPath.MatchString(r.URL.Path):
		m.blob(w, r, blobPath.FindStringSubmatch(r.URL.Path)[1], "application/octet-stream")
	default:
		http.NotFound(w, r)
	}
}

func (m *Mirror) blob(w http.ResponseWriter, r *http.Request, digest, media string) {
	f, err := os.Open(filepath.Join(m.layout, "blobs", strings.Replace(digest, ":", "/", 1)))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", media)
	w.Header().Set("Docker-Content-Digest", digest)
	http.ServeContent(w, r, "", st.ModTime(), f)
}
