package extender

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

// TestServingRefusesUnauthenticated: every address, loopback too, needs
// client certificates, unless Insecure says otherwise.
func TestServingRefusesUnauthenticated(t *testing.T) {
	dir := t.TempDir()
	ca, err := controlplane.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssueFiles(dir, "server", "gpushare-extender", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		o Serving
		// want: "" serves plain HTTP, "tls" TLS, "mtls" TLS with client
		// certificates; else part of the error.
		want string
	}{
		"loopback, plain":                     {Serving{Address: "127.0.0.1"}, `refusing to serve without client certificates on "127.0.0.1"`},
		"localhost, plain":                    {Serving{Address: "localhost"}, "refusing"},
		"IPv6 loopback, plain":                {Serving{Address: "::1"}, "refusing"},
		"loopback, TLS":                       {Serving{Address: "127.0.0.1", CertFile: cert, KeyFile: key}, "refusing"},
		"loopback, plain, insecure":           {Serving{Address: "127.0.0.1", Insecure: true}, ""},
		"loopback, TLS, insecure":             {Serving{Address: "127.0.0.1", CertFile: cert, KeyFile: key, Insecure: true}, "tls"},
		"loopback, mutual TLS":                {Serving{Address: "127.0.0.1", CertFile: cert, KeyFile: key, ClientCAFile: caFile}, "mtls"},
		"pod IP, plain":                       {Serving{Address: "10.0.0.5"}, `refusing to serve without client certificates on "10.0.0.5"`},
		"all interfaces, plain":               {Serving{Address: "0.0.0.0"}, "refusing"},
		"all interfaces, empty":               {Serving{Address: ""}, "refusing"},
		"pod IP, TLS without client CA":       {Serving{Address: "10.0.0.5", CertFile: cert, KeyFile: key}, "refusing"},
		"pod IP, plain, insecure":             {Serving{Address: "10.0.0.5", Insecure: true}, ""},
		"pod IP, mutual TLS":                  {Serving{Address: "10.0.0.5", CertFile: cert, KeyFile: key, ClientCAFile: caFile}, "mtls"},
		"certificate without key":             {Serving{Address: "127.0.0.1", CertFile: cert}, "go together"},
		"client CA without serving cert":      {Serving{Address: "127.0.0.1", ClientCAFile: caFile}, "needs --tls-cert-file"},
		"allowed names without client CA":     {Serving{Address: "127.0.0.1", CertFile: cert, KeyFile: key, AllowedNames: []string{"x"}}, "needs --client-ca-file"},
		"client CA file without certificates": {Serving{Address: "127.0.0.1", CertFile: cert, KeyFile: key, ClientCAFile: key}, "no certificate in the client CA file"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := c.o.TLSConfig()
			got := ""
			switch {
			case err != nil:
				got = err.Error()
			case cfg != nil && cfg.ClientAuth == tls.RequireAndVerifyClientCert:
				got = "mtls"
			case cfg != nil:
				got = "tls"
			}
			if c.want == "" && got != "" || !strings.Contains(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
			if strings.HasPrefix(c.want, "refusing") && !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("error %v is not ErrUnauthenticated", err)
			}
		})
	}
}

// TestClientCertificates: with a client CA, a client is refused in the
// handshake unless it presents a certificate of that CA (with an allowed
// common name, when names are given).
func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, err := controlplane.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := controlplane.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssueFiles(dir, "server", "gpushare-extender", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *controlplane.CA, cn string) []tls.Certificate {
		c, k, err := ca.Issue(cn)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{pair}
	}
	cfg, err := Serving{Address: "127.0.0.1", CertFile: cert, KeyFile: key, ClientCAFile: caFile,
		AllowedNames: []string{"kube-scheduler"}}.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	cases := map[string]struct {
		certs []tls.Certificate
		ok    bool
	}{
		"no certificate":          {nil, false},
		"another CA's":            {issue(other, "kube-scheduler"), false},
		"a name not allowed":      {issue(ca, "someone-else"), false},
		"kube-scheduler's, valid": {issue(ca, "kube-scheduler"), true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: c.certs, MinVersion: tls.VersionTLS12}}}
			resp, err := client.Post(srv.URL+"/gpushare-scheduler/bind", "application/json", strings.NewReader(`{}`))
			if err == nil {
				_ = resp.Body.Close()
			}
			if (err == nil) != c.ok {
				t.Errorf("error %v, want ok %v", err, c.ok)
			}
		})
	}
}
