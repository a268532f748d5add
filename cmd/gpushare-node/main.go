// Command gpushare-node is gpushare's node daemon: it discovers the node's
// GPUs, publishes their inventory on the Node for the scheduler, and runs
// the kubelet device plugins that give each container exactly the GPUs
// its pod's allocation record names.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/dra"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpu/source"
	"github.com/gpushare/gpushare/pkg/holder"
	"github.com/gpushare/gpushare/pkg/inventory"
	"github.com/gpushare/gpushare/pkg/lease"
	"github.com/gpushare/gpushare/pkg/mps"
	"github.com/gpushare/gpushare/pkg/node"
	"github.com/gpushare/gpushare/pkg/nodeclient"
	"github.com/gpushare/gpushare/pkg/podresources"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
	"github.com/gpushare/gpushare/pkg/usage"
	"github.com/gpushare/gpushare/pkg/version"
)

type options struct {
	kubeconfig   string
	node         string
	simConfig    string
	config       string
	wholeCard    bool
	pluginDir    string
	podResources string
	cdiDir       string
	mps          bool
	mpsPipeDir   string
	mpsLogDir    string
	mpsShmDir    string
	mpsControl   string
	enforcement  string
	hamiCoreLib  string
	hamiCoreDir  string
	noPlugin     bool
	hookDevices  int
	hookMemory   bool
	resync       time.Duration
	metricsAddr  string
	profiling    bool
	usageEvery   time.Duration
	leaseFor     time.Duration
}

func main() {
	mps.Shim()
	var o options
	fs := flag.NewFlagSet("gpushare-node", flag.ExitOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration if empty")
	fs.StringVar(&o.node, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.simConfig, "simulated-gpus", "", "simulate the GPUs described in this file instead of using NVML")
	fs.StringVar(&o.config, "config", "", "GPUShareArgs file (apiVersion config.gpushare.io/v1alpha1): the resource model and reservedMemory; defaults if empty")
	fs.BoolVar(&o.wholeCard, "whole-card", false, "hand out whole GPUs only (inventory mode WholeCard)")
	fs.StringVar(&o.pluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device plugin directory")
	fs.StringVar(&o.podResources, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's PodResources socket")
	fs.StringVar(&o.cdiDir, "cdi-dir", "/var/run/cdi", "where CDI specs for containers are written")
	fs.BoolVar(&o.mps, "mps", false, "share this node's GPUs under NVIDIA MPS: mark them so in the inventory (only they take keti.com/mpsgpu pods), run and supervise the MPS control daemon (with the device plugins), and give containers that ask for MPS the MPS client environment (limits from their own requests) and the pipe mount")
	fs.StringVar(&o.mpsPipeDir, "mps-pipe-dir", mps.DefaultPipeDir, "MPS pipe directory (the KETI system's path)")
	fs.StringVar(&o.mpsLogDir, "mps-log-dir", mps.DefaultLogDir, "MPS log directory")
	fs.StringVar(&o.mpsShmDir, "mps-shm-dir", mps.DefaultShmDir, "the MPS daemon's /dev/shm, mounted at /dev/shm in MPS containers so that they need no hostIPC (needs CAP_SYS_ADMIN; put it on a tmpfs); empty keeps the node's /dev/shm, and containers then need hostIPC: true")
	fs.StringVar(&o.mpsControl, "mps-control", "nvidia-cuda-mps-control", "the MPS control binary")
	fs.StringVar(&o.enforcement, "enforcement", string(gpusharev1.EnforcementNone), "what holds containers that share a GPU to their shares: "+
		"none (booked only: they are trusted to keep to them), mps (each runs as an MPS client with its memory and thread limits; needs --mps) or "+
		"hami-core (HAMi-core's library, installed on the node at --hami-core-library, is preloaded into each and given its limits). "+
		"Containers that ask for MPS are MPS clients whatever it is; containers of whole GPUs need none. Published with the inventory")
	fs.StringVar(&o.hamiCoreLib, "hami-core-library", "/usr/local/vgpu/libvgpu.so", "HAMi-core's library on the node (--enforcement=hami-core): mounted read-only into the containers it holds; where no file is there, the newest <file>.<version> beside it (HAMi installs libvgpu.so.v2.9.0)")
	fs.StringVar(&o.hamiCoreDir, "hami-core-dir", "/run/gpushare/hami-core", "a directory on the node for HAMi-core (--enforcement=hami-core): the daemon writes the preload list there, and the containers it holds share its lock directory, vgpulock")
	fs.IntVar(&o.hookDevices, "hook-devices", deviceplugin.DefaultHookDevices, "devices of "+gpusharev1.HookResource+
		", the devices through which GPU containers get their GPUs where deploy/gpu-hook-policy.yaml is in force (the n-th GPU container of a pod holds n: one in most pods); 0 serves none")
	fs.BoolVar(&o.hookMemory, "hook-memory", false, "serve no device per MiB of GPU memory: gpushare's scheduler counts the MiB, and GPU containers get their GPUs through "+
		gpusharev1.HookResource+" (needs the GPU hook admission policies, deploy/gpu-hook-policy.yaml). The kubelet starts containers several times faster than with a device per MiB. Resources counted in GiB keep their devices")
	fs.BoolVar(&o.noPlugin, "no-device-plugin", false, "publish the inventory only (simulated nodes without a kubelet, e.g. kwok)")
	fs.DurationVar(&o.resync, "resync", time.Minute, "how often the inventory is read and published even without a health event")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":9400", "address of the Prometheus /metrics endpoint; empty to disable")
	fs.BoolVar(&o.profiling, "profiling", false, "serve Go profiles at /debug/pprof/ on the metrics address")
	fs.DurationVar(&o.leaseFor, "lease-duration", 40*time.Second, "the daemon's heartbeat: it renews its Lease (kube-system/"+gpusharev1.LeasePrefix+"<node>) every quarter of this, and the scheduler sends no GPU pod to the node once the lease is this old; 0 disables it")
	fs.DurationVar(&o.usageEvery, "usage-interval", 30*time.Second, "how often live GPU use is sampled for load-aware scheduling; 0 to disable. It is published on the daemon's Lease with each renewal, at once when it moved enough to matter (on the Node without a lease)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println(version.Line("gpushare-node"))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("gpushare-node").WithValues("node", o.node)
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
	if o.leaseFor != 0 && (o.leaseFor < 4*time.Second || o.leaseFor%time.Second != 0) {
		return fmt.Errorf("--lease-duration=%v: want whole seconds, 4s or more (or 0 to disable)", o.leaseFor)
	}
	if o.hookDevices < 0 || o.hookDevices > deviceplugin.DefaultMaxDevices {
		return fmt.Errorf("--hook-devices=%d: want 0 to %d", o.hookDevices, deviceplugin.DefaultMaxDevices)
	}
	if o.hookMemory && o.hookDevices == 0 {
		return errors.New("--hook-memory needs hooks: --hook-devices=0 serves none")
	}
	backend, err := source.Open(o.simConfig, o.node)
	if err != nil {
		return err
	}
	defer func() { _ = backend.Close() }()
	var raw []byte
	if o.config != "" {
		if raw, err = os.ReadFile(o.config); err != nil {
			return err
		}
	}
	args, err := v1alpha1.LoadArgs(raw)
	if err != nil {
		return err
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.kubeconfig}, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := nodeclient.New(rc)
	if err != nil {
		return err
	}
	mode := gpusharev1.ModeShared
	if o.wholeCard {
		mode = gpusharev1.ModeWholeCard
	}
	// This node alone, so that the inventory is put back within seconds
	// when someone else changes it.
	nodeInformer := cache.NewSharedIndexInformer(client.Node(o.node), &corev1.Node{}, 0, cache.Indexers{})
	pub := inventory.NewPublisher(client, o.node, func() *corev1.Node {
		obj, ok, err := nodeInformer.GetStore().GetByKey(o.node)
		if err != nil || !ok {
			return nil
		}
		n, _ := obj.(*corev1.Node)
		return n
	})
	if _, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { pub.NodeChanged() },
		UpdateFunc: func(any, any) { pub.NodeChanged() },
	}); err != nil {
		return fmt.Errorf("watching node %s: %w", o.node, err)
	}
	if err := nodeInformer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		logger.Error(err, "Watching the node, which puts its GPU inventory back when someone else changes it (the daemon needs list and watch on nodes: deploy/node-rbac.yaml)")
	}); err != nil {
		return fmt.Errorf("watching node %s: %w", o.node, err)
	}
	go nodeInformer.Run(ctx.Done())
	go pub.Run(ctx)

	// The pods of this node, for the device plugin and the metrics.
	informer := cache.NewSharedIndexInformer(
		client.PodsOn(o.node),
		&corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	pods := corev1listers.NewPodLister(informer.GetIndexer())
	go informer.Run(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), informer.HasSynced)
	// Without the node's watch (a role without list and watch on nodes)
	// the daemon still publishes, comparing with its own last write.
	syncCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if !cache.WaitForCacheSync(syncCtx.Done(), nodeInformer.HasSynced) && ctx.Err() == nil {
		logger.Error(nil, "The node's watch has not synced; publishing without it until it does")
	}
	cancel()

	nodePods := func() []*corev1.Pod {
		list, err := pods.List(labels.Everything())
		if err != nil {
			logger.Error(err, "Listing the node's pods")
		}
		return list
	}

	// How long the kubelet waits on the device plugin, per call.
	calls := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpushare_node_device_plugin_call_duration_seconds",
		Help:    "Time the device plugin spent in each kubelet call (Allocate, PreStartContainer).",
		Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1, 5},
	}, []string{"method"})
	hamiCore, err := enforcement(o)
	if err != nil {
		return err
	}
	if hamiCore != nil {
		logger.Info("Holding shared containers to their shares with HAMi-core", "library", hamiCore.Library)
	}
	model, err := resource.New(args.ResourceModel)
	if err != nil {
		return err
	}
	// Pods' records, read by the rules every component follows.
	reader := record.Reader{Requests: model.PodRequest, RequestAnnotations: func(*corev1.Pod) []string { return model.RequestAnnotations() }}
	cfg := node.Config{Backend: backend, Publisher: pub, Mode: mode, MPS: o.mps, Enforcement: gpusharev1.Enforcement(o.enforcement), ReservedMiB: args.ReservedMiB,
		Resync: o.resync, UsageEvery: o.usageEvery}
	if o.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(calls, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			&usage.Collector{Backend: backend, Logger: logger, Node: o.node, Pods: nodePods,
				Reader: reader})
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		if o.profiling {
			mux.HandleFunc("GET /debug/pprof/", pprof.Index)
			mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		}
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		srv := &http.Server{Addr: o.metricsAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		cfg.Services = append(cfg.Services, func(ctx context.Context) error {
			go func() {
				<-ctx.Done()
				_ = srv.Close()
			}()
			return srv.ListenAndServe()
		})
		logger.Info("Serving metrics", "address", o.metricsAddr)
	}
	if !o.noPlugin {
		var mpsEnv *cdi.MPS
		if o.mps {
			mpsEnv = &cdi.MPS{PipeDir: o.mpsPipeDir, LogDir: o.mpsLogDir, ShmDir: o.mpsShmDir}
			d := &mps.Daemon{Control: o.mpsControl, PipeDir: o.mpsPipeDir, LogDir: o.mpsLogDir, ShmDir: o.mpsShmDir, Logger: logger.WithName("mps")}
			cfg.Services = append(cfg.Services, d.Run)
		}
		kubelet, err := podresources.Dial(logger, o.podResources, nil)
		if err != nil {
			return err
		}
		defer func() { _ = kubelet.Close() }()
		resources := deviceplugin.ResourcesFrom(args.ResourceModel)
		var plugins *deviceplugin.Manager
		draOpts := dra.Options{WholeCard: o.wholeCard, MPS: o.mps}
		c, err := holder.New(logger, holder.Config{Node: o.node, CDIDir: o.cdiDir, Kubelet: kubelet, MPS: mpsEnv,
			Enforcement: gpusharev1.Enforcement(o.enforcement), HAMiCore: hamiCore,
			MPSResources:       deviceplugin.MPSResources(resources),
			Served:             func() []string { return plugins.Served() },
			Requests:           model.PodRequest,
			RequestAnnotations: model.RequestAnnotations(),
			Mode:               mode,
			ReservedMiB:        args.ReservedMiB,
			UnitMiB:            model.UnitMiB,
			NodePods:           nodePods,
			// The claims gpushare-dra prepared, read from its specs in the
			// same CDI directory, beside the records of the node's pods as
			// gpushare-dra counts them.
			ClaimsBeside: func(pod *corev1.Pod, uuids []string, gpus []gpu.Device) error {
				claims := &dra.Preparer{Dir: o.cdiDir, Pool: o.node, GPUs: func() []gpu.Device { return gpus }}
				return claims.Beside(uuids, func() map[string]dra.Share {
					return dra.StartedBookings(nodePods(), pod, reader, dra.NodeOf(o.node, gpus, draOpts))
				})
			},
			Pods: func(ctx context.Context, ns, name string) (*corev1.Pod, error) {
				// The informer first; a pod it has not seen yet from
				// the apiserver.
				if p, err := pods.Pods(ns).Get(name); err == nil {
					return p, nil
				}
				return client.GetPod(ctx, ns, name)
			}})
		if err != nil {
			return err
		}
		defer c.Close()
		plugins, err = deviceplugin.New(logger, deviceplugin.Config{Dir: o.pluginDir, Resources: resources, Backend: backend,
			HookDevices: cmp.Or(o.hookDevices, -1), HookMemory: o.hookMemory,
			Observe: func(method string, took time.Duration) { calls.WithLabelValues(method).Observe(took.Seconds()) },
		}, c)
		if err != nil {
			return err
		}
		client.OnNode = warnStale(logger, plugins.Skipped())
		cfg.Plugins = plugins
		cfg.Sweeper = &cdi.Sweeper{Dir: o.cdiDir, Claims: c, Logger: logger}
		if hamiCore != nil {
			cfg.Sweeper.CacheDir = hamiCore.LockDir
		}
	}
	if o.leaseFor > 0 {
		leases, err := nodeclient.NewLeases(rc)
		if err != nil {
			return err
		}
		r := &lease.Renewer{Client: leases, Node: o.node, Duration: o.leaseFor}
		// Live use rides on the lease, not the Node (pkg/lease).
		cfg.Usage = r
		cfg.Services = append(cfg.Services, func(ctx context.Context) error {
			r.Run(ctx)
			return nil
		})
	}
	d, err := node.New(cfg)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// warnStale returns a check of this node as a patch left it: a resource
// the device plugin does not serve here (too many devices) that the node
// still advertises makes the kubelet refuse every pod that asks for it.
// The kubelet keeps a resource that was a device plugin resource here
// before, at capacity 0; only the resources a node does not advertise at
// all are left to gpushare's scheduler. It logs each such resource once,
// with the command that removes it.
func warnStale(logger klog.Logger, skipped map[string]error) func(*corev1.Node) {
	warned := map[string]bool{}
	return func(n *corev1.Node) {
		for name := range skipped {
			q, ok := n.Status.Capacity[corev1.ResourceName(name)]
			if !ok {
				delete(warned, name)
				continue
			}
			if warned[name] {
				continue
			}
			warned[name] = true
			path := "/status/capacity/" + strings.ReplaceAll(name, "/", "~1")
			logger.Error(nil, "The node still advertises a resource this daemon does not serve: the kubelet refuses pods that ask for it until it is removed from the node's status",
				"resource", name, "capacity", q.String(),
				"remove", fmt.Sprintf(`kubectl patch node %s --subresource=status --type=json -p '[{"op":"remove","path":"%s"}]'`, n.Name, path))
		}
	}
}

// enforcement checks --enforcement and, for hami-core, that HAMi-core's
// library is where --hami-core-library says and exports its hooks, and
// writes the preload list
// and the lock directory under --hami-core-dir: what the containers it
// holds mount (cdi.HAMiCore).
func enforcement(o options) (*cdi.HAMiCore, error) {
	switch e := gpusharev1.Enforcement(o.enforcement); e {
	case gpusharev1.EnforcementNone:
		return nil, nil
	case gpusharev1.EnforcementMPS:
		if !o.mps {
			return nil, errors.New("--enforcement=mps needs --mps: the node must run MPS to hold containers to their shares by it")
		}
		return nil, nil
	case gpusharev1.EnforcementHAMiCore:
	default:
		return nil, fmt.Errorf("--enforcement=%q: want one of %v", e, gpusharev1.Enforcements())
	}
	lib, err := cdi.FindHAMiCoreLibrary(o.hamiCoreLib)
	if err != nil {
		return nil, fmt.Errorf("--enforcement=hami-core: --hami-core-library=%s: %w: install it on the node, "+
			"or run with --enforcement=none to book shares without holding containers to them", o.hamiCoreLib, err)
	}
	if err := cdi.CheckHAMiCoreLibrary(lib); err != nil {
		return nil, fmt.Errorf("--enforcement=hami-core: %w", err)
	}
	h := &cdi.HAMiCore{Library: lib, Preload: filepath.Join(o.hamiCoreDir, "ld.so.preload"), LockDir: filepath.Join(o.hamiCoreDir, "vgpulock")}
	// The lock directory is shared by containers of any user, as HAMi's.
	if err := os.MkdirAll(h.LockDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(h.LockDir, 0o777|os.ModeSticky); err != nil {
		return nil, err
	}
	tmp := h.Preload + ".tmp"
	if err := os.WriteFile(tmp, []byte(cdi.PreloadContent), 0o644); err != nil {
		return nil, err
	}
	return h, os.Rename(tmp, h.Preload)
}
