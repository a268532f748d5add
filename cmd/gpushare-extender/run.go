package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/decision"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/refused"
	"github.com/gpushare/gpushare/pkg/resource"
	"github.com/gpushare/gpushare/pkg/workload"
)

// check validates the flags and returns the scheduler names and the TLS
// configuration (nil for plain HTTP).
func (o *options) check() ([]string, *tls.Config, error) {
	if o.maxNodes < 0 {
		return nil, nil, fmt.Errorf("--max-filtered-nodes must not be negative, got %d", o.maxNodes)
	}
	if o.maxInflight <= 0 || o.maxBinds <= 0 || o.maxBodyBytes <= 0 {
		return nil, nil, fmt.Errorf("--max-requests-inflight (%d), --max-binds-inflight (%d) and --max-request-bytes (%d) must be positive",
			o.maxInflight, o.maxBinds, o.maxBodyBytes)
	}
	schedulers := list(o.schedulerNames)
	if len(schedulers) == 0 {
		return nil, nil, errors.New("--scheduler-names must name at least one scheduler")
	}
	o.serving.AllowedNames = list(o.allowedNames)
	tlsConfig, err := o.serving.TLSConfig()
	if err != nil {
		return nil, nil, err
	}
	return schedulers, tlsConfig, nil
}

// clientConfig is the configuration of the extender's client of
// kube-apiserver, which it sets as kube-scheduler sets its own.
func (o *options) clientConfig() (*rest.Config, error) {
	// --kubeconfig, else $KUBECONFIG, else in-cluster.
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	// The apiserver encodes each pod's watch events once per format, and
	// protobuf costs it and us less than JSON.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	// No gzip: a client that accepts it gets its informers' watch streams
	// compressed, event by event, for as long as they last. The extender
	// runs beside the control plane, where compressing costs more CPU,
	// on both ends, than the bytes it saves are worth.
	cfg.DisableCompression = true
	return cfg, nil
}

func run(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	schedulers, tlsConfig, err := o.check()
	if err != nil {
		return err
	}
	args, err := v1alpha1.LoadArgsFile(o.config)
	if err != nil {
		return err
	}
	if args.DefragOn() {
		return errors.New("--config: defrag.enabled needs gpushare-scheduler; the HTTP extender does not move pods")
	}
	model, err := resource.New(args.ResourceModel)
	if err != nil {
		return err
	}
	policy, err := decision.Policy(args, model)
	if err != nil {
		return err
	}
	cfg, err := o.clientConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cache := gpucache.New(logger, gpucache.Options{Requests: model.PodRequest, Refused: func(pod *corev1.Pod, err error) {
		logger.Info("A pod's GPU record books nothing, or books though it is not what the pod asks", "pod", klog.KObj(pod), "err", err)
	}, Resources: resource.PodCPUMemory, RequestAnnotations: func(*corev1.Pod) []string { return model.RequestAnnotations() }})
	policy.Follow(cache)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(gpucache.DropManagedFields))
	cacheSynced, err := gpucache.Watch(cache, factory)
	if err != nil {
		return err
	}
	// What DRA claims hold of gpushare's devices books the same GPUs, on
	// a cluster that serves them.
	var claims resourcelisters.ResourceClaimLister
	if servesClaims(client) {
		claimsSynced, err := gpucache.WatchClaims(cache, factory)
		if err != nil {
			return err
		}
		podsSynced := cacheSynced
		cacheSynced = func() bool { return podsSynced() && claimsSynced() }
		claims = factory.Resource().V1().ResourceClaims().Lister()
	} else {
		logger.Info("The cluster serves no resource.k8s.io/v1 ResourceClaims: the extender books extended-resource pods alone")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), gpucache.NewCollector(cache))
	synced := make(chan struct{})
	srv := &extender.Server{Model: model, Policy: policy, Cache: cache, Client: client, Pods: factory.Core().V1().Pods().Lister(), Claims: claims, Logger: logger,
		Seed: args.Seed, Prefix: o.prefix, MaxBodyBytes: o.maxBodyBytes, MaxInflight: o.maxInflight, MaxBindsInflight: o.maxBinds,
		SchedulerNames: schedulers, Metrics: extender.NewMetrics(reg), MaxNodes: o.maxNodes, BestOnly: o.bestOnly,
		Ready: func() bool {
			select {
			case <-synced:
				return true
			default:
				return false
			}
		}}
	servers := o.servers(srv, reg, tlsConfig)

	go gpucache.RunExpiry(ctx, cache)
	go srv.RunExpiry(ctx)
	go gpucache.WatchLeases(ctx, cache, client, nil)
	if claims != nil {
		// A claim its node refuses to prepare is released, not left
		// holding its GPU.
		broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
		broadcaster.StartRecordingToSink(ctx.Done())
		defer broadcaster.Shutdown()
		var releaser refused.Releaser
		releaser.Start(refused.Config{Bookings: cache.OverCommitted, Pods: factory.Core().V1().Pods().Lister(), Client: client,
			Recorder: broadcaster.NewRecorder(scheme.Scheme, "gpushare-extender"), Logger: logger, Grace: o.releaseGrace})
		go releaser.Run(ctx, time.Second)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	if !gpucache.WaitSynced(ctx, cacheSynced) {
		return fmt.Errorf("the GPU cache did not sync: %w", ctx.Err())
	}
	if err := learnWorkload(logger, policy, model, factory, schedulers); err != nil {
		return err
	}
	close(synced)
	logger.Info("Serving", "address", servers[0].Addr, "tls", tlsConfig != nil, "clientCertificates", o.serving.ClientCAFile != "",
		"urlPrefix", o.prefix, "schedulers", schedulers, "nodePolicy", args.NodePolicy, "learnsWorkload", policy.Learns(),
		"resources", model.Names())
	return extender.Serve(ctx, servers)
}

// learnWorkload has policy learn the workload from the pods of the
// extender's schedulers in the cluster, oldest first, before it serves:
// a restarted extender starts from what runs, not from its prior.
func learnWorkload(logger klog.Logger, policy *workload.Policy, model *resource.Model, factory informers.SharedInformerFactory, schedulers []string) error {
	if !policy.Learns() {
		return nil
	}
	all, err := factory.Core().V1().Pods().Lister().List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing pods to learn the workload from: %w", err)
	}
	var mine []*corev1.Pod
	for _, p := range all {
		if slices.Contains(schedulers, p.Spec.SchedulerName) {
			mine = append(mine, p)
		}
	}
	logger.V(1).Info("Learned the workload from the cluster's pods", "pods", decision.Learn(policy, model, mine, nil))
	return nil
}

// servesClaims reports whether the cluster serves resource.k8s.io/v1
// ResourceClaims (Kubernetes 1.34 and later).
func servesClaims(client kubernetes.Interface) bool {
	list, err := client.Discovery().ServerResourcesForGroupVersion(resourceapi.SchemeGroupVersion.String())
	if err != nil {
		return false
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "resourceclaims" })
}
