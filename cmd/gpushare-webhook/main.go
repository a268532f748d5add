// Command gpushare-webhook is gpushare's mutating admission webhook for
// GPU quotas: it writes into each pod, as it is created, the GPU memory
// and compute it charges against its namespace's quota, as the extended
// resources gpushare.io/quota-memory and gpushare.io/quota-compute, which
// a ResourceQuota bounds (docs/install.md, "GPU quotas"). See
// deploy/quota-webhook.yaml for its registration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/resource"
	"github.com/gpushare/gpushare/pkg/version"
	"github.com/gpushare/gpushare/pkg/webhook"
)

type options struct {
	kubeconfig  string
	address     string
	port        int
	healthzPort int
	certFile    string
	keyFile     string
	config      string
	qps         float64
	burst       int
	version     bool
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; if empty, the KUBECONFIG environment variable, then the in-cluster configuration")
	fs.StringVar(&o.address, "bind-address", "0.0.0.0", "address to serve on; the API server calls the webhook through its Service")
	fs.IntVar(&o.port, "port", 9443, "port to serve the webhook (POST /quota) and its metrics (GET /metrics) on, over HTTPS")
	fs.IntVar(&o.healthzPort, "healthz-port", 0, "if not 0, also serve /healthz on this port of --bind-address over plain HTTP (for kubelet probes)")
	fs.StringVar(&o.certFile, "tls-cert-file", "", "serving certificate (PEM), for the name the API server calls (the Service's DNS name); required")
	fs.StringVar(&o.keyFile, "tls-private-key-file", "", "private key (PEM) of --tls-cert-file; required")
	fs.StringVar(&o.config, "config", "", "GPUShareArgs file (apiVersion config.gpushare.io/v1alpha1), the scheduler's: its resource model says what pods ask; defaults if empty")
	fs.Float64Var(&o.qps, "kube-api-qps", 50, "queries per second to the apiserver")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "burst of queries to the apiserver")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
}

func main() {
	var o options
	fs := flag.NewFlagSet("gpushare-webhook", flag.ExitOnError)
	o.addFlags(fs)
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if o.version {
		fmt.Println(version.Line("gpushare-webhook"))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("gpushare-webhook")
	if err := run(klog.NewContext(ctx, logger), o); err != nil {
		logger.Error(err, "Exiting")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	if o.certFile == "" || o.keyFile == "" {
		return errors.New("--tls-cert-file and --tls-private-key-file are required: the API server calls webhooks over HTTPS only")
	}
	// Loaded here to fail fast; no client certificates (the API server
	// presents none to webhooks by default, and a review has no effect
	// but its answer).
	tlsConfig, err := extender.Serving{Address: o.address, CertFile: o.certFile, KeyFile: o.keyFile, Insecure: true}.TLSConfig()
	if err != nil {
		return err
	}
	args, err := v1alpha1.LoadArgsFile(o.config)
	if err != nil {
		return err
	}
	model, err := resource.New(args.ResourceModel)
	if err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	gpus := &webhook.GPUs{}
	nodes, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { gpus.Set(obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { gpus.Set(obj.(*corev1.Node)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				gpus.Delete(t.Key)
				return
			}
			gpus.Delete(obj.(*corev1.Node).Name)
		},
	})
	if err != nil {
		return err
	}
	quotas := factory.Core().V1().ResourceQuotas().Lister()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		webhook.NewQuotaCollector(func() ([]*corev1.ResourceQuota, error) { return quotas.List(labels.Everything()) }))
	charger := &webhook.Charger{Model: model, GPUs: gpus.List, Claims: claims{client}, Bounded: bounded(quotas), Metrics: webhook.NewMetrics(reg)}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	// Every node's GPUs are known before the first review: they price
	// whole GPUs and bound the memory a request may ask.
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		return fmt.Errorf("the nodes' GPUs were not read: %w", ctx.Err())
	}

	mux := http.NewServeMux()
	mux.Handle("/quota", charger.Handler(logger))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	servers := []*http.Server{{Addr: net.JoinHostPort(o.address, strconv.Itoa(o.port)), Handler: mux, TLSConfig: tlsConfig,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second}}
	if o.healthzPort != 0 {
		health := http.NewServeMux()
		health.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		servers = append(servers, &http.Server{Addr: net.JoinHostPort(o.address, strconv.Itoa(o.healthzPort)), Handler: health,
			ReadHeaderTimeout: 10 * time.Second})
	}
	logger.Info("Serving", "address", servers[0].Addr, "resources", model.Names())
	return extender.Serve(ctx, servers)
}

// bounded reports whether a ResourceQuota of a namespace bounds either
// charged resource.
func bounded(quotas corelisters.ResourceQuotaLister) func(string) bool {
	return func(namespace string) bool {
		list, err := quotas.ResourceQuotas(namespace).List(labels.Everything())
		if err != nil {
			return true
		}
		// The API server bounds extended resources as requests.<name>
		// alone: a quota on the bare name or limits.<name> is accepted
		// and never enforced (kubectl inspect gpushare quota says so).
		for _, q := range list {
			for _, n := range webhook.Charged {
				if _, ok := q.Spec.Hard["requests."+n]; ok {
					return true
				}
			}
		}
		return false
	}
}

// claims reads claims and templates from the API server: a pod's claim
// may be created just before it, sooner than an informer would see it.
type claims struct{ client kubernetes.Interface }

func (c claims) Claim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	return c.client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c claims) Template(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimTemplate, error) {
	return c.client.ResourceV1().ResourceClaimTemplates(namespace).Get(ctx, name, metav1.GetOptions{})
}
