// Command gpushare-extender is gpushare's HTTP scheduler extender for
// clusters that keep stock kube-scheduler. See
// deploy/extender-scheduler-config.yaml for the kube-scheduler side.
//
// It serves TLS with client certificates (kube-scheduler's extender client
// can present a certificate, not a bearer token), on loopback unless told
// otherwise; plain HTTP only with --insecure-serve-unauthenticated.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/version"
)

type options struct {
	kubeconfig     string
	serving        extender.Serving
	port           int
	healthzPort    int
	prefix         string
	config         string
	maxBodyBytes   int64
	maxInflight    int
	maxBinds       int
	schedulerNames string
	allowedNames   string
	qps            float64
	burst          int
	profiling      bool
	maxNodes       int
	bestOnly       bool
	releaseGrace   time.Duration
	version        bool
}

func main() {
	var o options
	fs := flag.NewFlagSet("gpushare-extender", flag.ExitOnError)
	o.addFlags(fs)
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if o.version {
		fmt.Println(version.Line("gpushare-extender"))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("gpushare-extender")
	if err := run(klog.NewContext(ctx, logger), o); err != nil {
		logger.Error(err, "Exiting")
		os.Exit(1)
	}
}

// list splits a comma-separated flag value, dropping empty items.
func list(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
