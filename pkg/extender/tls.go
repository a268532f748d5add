package extender

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
)

// Serving is how the extender serves: its address and its TLS files.
//
// kube-scheduler's extender client (ExtenderTLSConfig in
// k8s.io/kubernetes pkg/scheduler/apis/config, used by makeTransport in
// pkg/scheduler/extender.go, v1.36) can present a client certificate
// (certFile/keyFile or certData/keyData) and check the server against a
// CA (caFile/caData); it cannot send a bearer token or any other header.
// So clients are authenticated by certificate alone.
type Serving struct {
	// Address is the IP address or host name to listen on.
	Address string
	// CertFile and KeyFile are the serving certificate and key; both or
	// neither. Neither serves plain HTTP.
	CertFile, KeyFile string
	// ClientCAFile, if set, makes every client present a certificate
	// signed by one of its CAs, checked in the TLS handshake.
	ClientCAFile string
	// AllowedNames, if not empty, are the only client certificate common
	// names accepted.
	AllowedNames []string
	// Insecure allows serving without checking client certificates.
	Insecure bool
}

// ErrUnauthenticated is serving without client certificates and without
// Serving.Insecure. Loopback is no exception: with host networking (the
// chart's extender beside kube-scheduler) every host-network pod of the
// node reaches it, and whoever can call bind places pods past every
// filter.
var ErrUnauthenticated = errors.New("refusing to serve without client certificates")

// TLSConfig checks the combination and returns the server's TLS
// configuration, nil for plain HTTP.
func (o Serving) TLSConfig() (*tls.Config, error) {
	switch {
	case (o.CertFile == "") != (o.KeyFile == ""):
		return nil, errors.New("--tls-cert-file and --tls-private-key-file go together")
	case o.ClientCAFile != "" && o.CertFile == "":
		return nil, errors.New("--client-ca-file needs --tls-cert-file and --tls-private-key-file")
	case len(o.AllowedNames) > 0 && o.ClientCAFile == "":
		return nil, errors.New("--client-allowed-names needs --client-ca-file")
	case o.ClientCAFile == "" && !o.Insecure:
		return nil, fmt.Errorf("%w on %q: set --tls-cert-file, --tls-private-key-file and --client-ca-file "+
			"(kube-scheduler's tlsConfig certFile, keyFile and caFile), or pass --insecure-serve-unauthenticated", ErrUnauthenticated, o.Address)
	case o.CertFile == "":
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if o.ClientCAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(o.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the client CA: %w", err)
	}
	cfg.ClientCAs = x509.NewCertPool()
	if !cfg.ClientCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in the client CA file %s", o.ClientCAFile)
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	if len(o.AllowedNames) > 0 {
		allowed := slices.Clone(o.AllowedNames)
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			// The chain is verified by now; only its leaf's name is left.
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no client certificate")
			}
			if cn := cs.PeerCertificates[0].Subject.CommonName; !slices.Contains(allowed, cn) {
				return fmt.Errorf("client certificate common name %q is not allowed", cn)
			}
			return nil
		}
	}
	return cfg, nil
}
