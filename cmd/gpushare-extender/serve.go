package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpushare/gpushare/pkg/extender"
)

// servers returns the main server (the verbs, /healthz, /metrics and
// the profiles, under tlsConfig) and, with --healthz-port, the plain
// /healthz server.
func (o *options) servers(srv *extender.Server, reg *prometheus.Registry, tlsConfig *tls.Config) []*http.Server {
	mux := http.NewServeMux()
	mux.Handle("/", srv.Handler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if o.profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	}
	// A request must arrive within ReadTimeout: a slow body cannot hold
	// one of the few slots for long.
	out := []*http.Server{{Addr: net.JoinHostPort(o.serving.Address, strconv.Itoa(o.port)), Handler: mux,
		TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute}}
	if o.healthzPort != 0 {
		health := http.NewServeMux()
		health.HandleFunc("GET /healthz", srv.Healthz)
		out = append(out, &http.Server{Addr: net.JoinHostPort(o.serving.Address, strconv.Itoa(o.healthzPort)), Handler: health,
			ReadHeaderTimeout: 10 * time.Second})
	}
	return out
}

// serve runs the servers until ctx ends or one fails, then shuts all
// down.
func serve(ctx context.Context, servers []*http.Server) error {
	errc := make(chan error, len(servers))
	for _, hs := range servers {
		go func() {
			if hs.TLSConfig != nil {
				// The certificate is in TLSConfig.
				errc <- hs.ListenAndServeTLS("", "")
				return
			}
			errc <- hs.ListenAndServe()
		}()
	}
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, hs := range servers {
		if e := hs.Shutdown(shutdown); e != nil && !errors.Is(e, http.ErrServerClosed) {
			err = errors.Join(err, e)
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
