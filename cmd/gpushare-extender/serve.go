package main

import (
	"crypto/tls"
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
