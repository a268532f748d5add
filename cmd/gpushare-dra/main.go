// Command gpushare-dra is gpushare's DRA driver, gpu.gpushare.io: a
// kubelet plugin that publishes the node's GPUs as shared devices with
// consumable capacity (memory, compute) and prepares the claims
// allocated them as CDI specs. It runs beside gpushare-node, in the same
// pod, on the same GPUs and CDI directory; it is a command of its own
// because the client it needs would double gpushare-node's memory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/dra"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpu/source"
	"github.com/gpushare/gpushare/pkg/mps"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
	"github.com/gpushare/gpushare/pkg/version"
)

type options struct {
	kubeconfig  string
	config      string
	node        string
	simConfig   string
	wholeCard   bool
	cdiDir      string
	mps         bool
	mpsPipeDir  string
	mpsLogDir   string
	mpsShmDir   string
	pluginDir   string
	registryDir string
	resync      time.Duration
	healthAddr  string
}

func main() {
	var o options
	fs := flag.NewFlagSet("gpushare-dra", flag.ExitOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration if empty")
	fs.StringVar(&o.config, "config", "", "GPUShareArgs file (apiVersion config.gpushare.io/v1alpha1), as gpushare-node's: the resource model by which pods' records are read; defaults if empty")
	fs.StringVar(&o.node, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME): the devices' pool")
	fs.StringVar(&o.simConfig, "simulated-gpus", "", "simulate the GPUs described in this file instead of using NVML (as gpushare-node's flag)")
	fs.BoolVar(&o.wholeCard, "whole-card", false, "hand out whole GPUs only: each device takes one claim")
	fs.StringVar(&o.cdiDir, "cdi-dir", "/var/run/cdi", "where the claims' CDI specs are written")
	fs.BoolVar(&o.mps, "mps", false, "the node's GPUs run NVIDIA MPS (gpushare-node --mps): claims' containers become MPS clients, limited to what they consumed")
	fs.StringVar(&o.mpsPipeDir, "mps-pipe-dir", mps.DefaultPipeDir, "MPS pipe directory, as gpushare-node's")
	fs.StringVar(&o.mpsLogDir, "mps-log-dir", mps.DefaultLogDir, "MPS log directory, as gpushare-node's")
	fs.StringVar(&o.mpsShmDir, "mps-shm-dir", mps.DefaultShmDir, "the MPS daemon's /dev/shm, as gpushare-node's")
	fs.StringVar(&o.pluginDir, "plugin-dir", "/var/lib/kubelet/plugins/"+dra.Driver, "the driver's directory (its socket) under the kubelet's plugins directory")
	fs.StringVar(&o.registryDir, "registry-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory")
	fs.DurationVar(&o.resync, "resync", 30*time.Second, "how often the GPUs are read, and published again where their health changed")
	fs.StringVar(&o.healthAddr, "health-bind-address", ":9401", "address of /healthz (the driver runs) and /readyz (the kubelet registered it); empty to disable")
	showVersion := fs.Bool("version", false, "print the version and exit")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println(version.Line("gpushare-dra"))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("gpushare-dra").WithValues("node", o.node)
	if err := run(klog.NewContext(ctx, logger), o); err != nil {
		logger.Error(err, "Exiting")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	if o.node == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if o.resync <= 0 {
		return fmt.Errorf("--resync=%v: want a positive duration", o.resync)
	}
	reader, err := readerFrom(o.config)
	if err != nil {
		return err
	}
	backend, err := source.Open(o.simConfig, o.node)
	if err != nil {
		return err
	}
	defer func() { _ = backend.Close() }()
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.kubeconfig}, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// Protobuf, as kube-scheduler and the kubelet speak: it costs the
	// apiserver and us less than JSON.
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.cdiDir, 0o755); err != nil {
		return err
	}
	// The driver's socket directory under the kubelet's plugins: the
	// kubelet does not make it.
	if err := os.MkdirAll(o.pluginDir, 0o750); err != nil {
		return err
	}
	var mpsEnv *cdi.MPS
	if o.mps {
		mpsEnv = &cdi.MPS{PipeDir: o.mpsPipeDir, LogDir: o.mpsLogDir, ShmDir: o.mpsShmDir}
	}
	// The pods on this node, which book its GPUs through extended
	// resources.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = "spec.nodeName=" + o.node
	}))
	pods := factory.Core().V1().Pods()
	opts := dra.Options{WholeCard: o.wholeCard, MPS: o.mps}
	p := &dra.Plugin{Logger: logger, Options: opts,
		Preparer: &dra.Preparer{Dir: o.cdiDir, Pool: o.node, MPS: mpsEnv, GPUs: func() []gpu.Device {
			gpus, err := backend.Devices()
			if err != nil {
				logger.Error(err, "Listing the GPUs for a claim")
			}
			return gpus
		},
			// The pods on this node that book its GPUs through extended
			// resources: a claim must fit beside them too.
			Booked: func() (map[string]dra.Share, error) {
				if !pods.Informer().HasSynced() {
					return nil, errors.New("the node's pods are not listed yet")
				}
				list, err := pods.Lister().List(labels.Everything())
				if err != nil {
					return nil, err
				}
				gpus, err := backend.Devices()
				if err != nil {
					return nil, err
				}
				return dra.PodBookings(list, reader, dra.NodeOf(o.node, gpus, opts)), nil
			}}}
	// A pod bound to the node or ended changes what its GPUs have left
	// for claims: publish again.
	if _, err := pods.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.Wake() },
		UpdateFunc: func(o, n any) { wakeOnChange(p, o, n) },
		DeleteFunc: func(any) { p.Wake() },
	}); err != nil {
		return err
	}
	// Shutdown waits for the informers, which stop with their context:
	// cancel it first, or an error of Run would hang the process.
	informing, stopInforming := context.WithCancel(ctx)
	factory.Start(informing.Done())
	defer func() {
		stopInforming()
		factory.Shutdown()
	}()
	factory.WaitForCacheSync(ctx.Done())
	if o.healthAddr != "" {
		srv := &http.Server{Addr: o.healthAddr, Handler: health(p), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Serving health checks", "address", o.healthAddr)
			}
		}()
		defer func() { _ = srv.Close() }()
	}
	return p.Run(ctx, client, o.node, o.pluginDir, o.registryDir, backend, o.resync)
}

// wakeOnChange wakes p when a pod's record, its node or its phase
// changed: what it books did.
func wakeOnChange(p *dra.Plugin, oldObj, newObj any) {
	o, ok1 := oldObj.(*corev1.Pod)
	n, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 || o.Status.Phase != n.Status.Phase || o.Spec.NodeName != n.Spec.NodeName {
		p.Wake()
		return
	}
	ov, _ := record.Value(o)
	nv, _ := record.Value(n)
	if ov != nv {
		p.Wake()
	}
}

// readerFrom returns the reader of pods' records under the resource
// model of the GPUShareArgs file at path (defaults if empty), as
// gpushare-node and the scheduler read them.
func readerFrom(path string) (record.Reader, error) {
	var raw []byte
	if path != "" {
		var err error
		if raw, err = os.ReadFile(path); err != nil {
			return record.Reader{}, fmt.Errorf("--config: %w", err)
		}
	}
	args, err := v1alpha1.LoadArgs(raw)
	if err != nil {
		return record.Reader{}, fmt.Errorf("--config %s: %w", path, err)
	}
	model, err := resource.New(args.ResourceModel)
	if err != nil {
		return record.Reader{}, fmt.Errorf("--config %s: %w", path, err)
	}
	keys := model.RequestAnnotations()
	return record.Reader{Requests: model.PodRequest, RequestAnnotations: func(*corev1.Pod) []string { return keys }}, nil
}

// health serves /healthz, ok while the process runs (the plugin may be
// starting), and /readyz, ok once the kubelet has registered the plugin.
func health(p *dra.Plugin) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := p.Registered(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}
