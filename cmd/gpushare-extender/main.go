// Command gpushare-extender is gpushare's HTTP scheduler extender for
// clusters that keep stock kube-scheduler. See
// deploy/extender-scheduler-config.yaml for the kube-scheduler side.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/plugin"
	"github.com/gpushare/gpushare/pkg/resource"
)

type options struct {
	kubeconfig   string
	bindAddress  string
	port         int
	prefix       string
	config       string
	maxBodyBytes int64
	qps          float64
	burst        int
	profiling    bool
	maxNodes     int
	bestOnly     bool
}

func main() {
	var o options
	fs := flag.NewFlagSet("gpushare-extender", flag.ExitOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration if empty")
	fs.StringVar(&o.bindAddress, "bind-address", "0.0.0.0", "address to serve on")
	fs.IntVar(&o.port, "port", 8888, "port to serve the extender verbs, /healthz and /metrics on")
	fs.StringVar(&o.prefix, "url-prefix", "/gpushare-scheduler", "URL prefix of the filter, prioritize and bind verbs (the urlPrefix path in KubeSchedulerConfiguration)")
	fs.StringVar(&o.config, "config", "", "GPUShareArgs file (apiVersion config.gpushare.io/v1alpha1); defaults if empty")
	fs.Int64Var(&o.maxBodyBytes, "max-request-bytes", extender.DefaultMaxBodyBytes, "largest request body accepted")
	fs.Float64Var(&o.qps, "kube-api-qps", 200, "queries per second to the apiserver")
	fs.IntVar(&o.burst, "kube-api-burst", 400, "burst of queries to the apiserver")
	fs.IntVar(&o.maxNodes, "max-filtered-nodes", 100, "most nodes filter passes on to scoring, the best by the node policy; 0 passes every node that fits")
	fs.BoolVar(&o.bestOnly, "best-node-only", true, "pass pods without soft scheduling preferences (preferred node or pod affinity, ScheduleAnyway topology spread) on the best node alone, so kube-scheduler skips scoring them; false gives them --max-filtered-nodes like the others")
	fs.BoolVar(&o.profiling, "profiling", false, "serve Go profiles at /debug/pprof/ on the serving address")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("gpushare-extender")
	if err := run(klog.NewContext(ctx, logger), o); err != nil {
		logger.Error(err, "Exiting")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	if o.maxNodes < 0 {
		return fmt.Errorf("--max-filtered-nodes must not be negative, got %d", o.maxNodes)
	}
	var raw []byte
	if o.config != "" {
		var err error
		if raw, err = os.ReadFile(o.config); err != nil {
			return err
		}
	}
	args, err := v1alpha1.LoadArgs(raw)
	if err != nil {
		return err
	}
	model, err := resource.New(args.ResourceModel)
	if err != nil {
		return err
	}
	placer, err := alloc.NewPlacer(alloc.Config{Node: args.NodePolicy, GPU: args.GPUPolicy,
		NoTopology: args.DisableTopology, Options: alloc.Options{Seed: args.Seed}})
	if err != nil {
		return err
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.kubeconfig}, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cache := gpucache.New(logger)
	factory := informers.NewSharedInformerFactory(client, 0)
	if err := plugin.Watch(cache, factory); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), gpucache.NewCollector(cache))
	synced := make(chan struct{})
	srv := &extender.Server{Model: model, Placer: placer, Cache: cache, Client: client, Pods: factory.Core().V1().Pods().Lister(), Logger: logger,
		Seed: args.Seed, Prefix: o.prefix, MaxBodyBytes: o.maxBodyBytes, Metrics: extender.NewMetrics(reg), MaxNodes: o.maxNodes, BestOnly: o.bestOnly,
		Ready: func() bool {
			select {
			case <-synced:
				return true
			default:
				return false
			}
		}}
	mux := http.NewServeMux()
	mux.Handle("/", srv.Handler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if o.profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	}
	addr := net.JoinHostPort(o.bindAddress, strconv.Itoa(o.port))
	hs := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	go plugin.ExpireLive(ctx, cache)
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	close(synced)
	logger.Info("Serving", "address", addr, "urlPrefix", o.prefix, "nodePolicy", args.NodePolicy, "resources", model.Names())
	errc := make(chan error, 1)
	go func() { errc <- hs.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
