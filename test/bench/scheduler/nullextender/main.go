// Command nullextender is the cheapest scheduler extender the benchmark
// can put beside kube-scheduler: the floor under any extender's pods/s.
//
// It serves kube-scheduler's filter and bind calls over mutual TLS, as
// gpushare-extender does, and does nothing else: filter passes the pod on
// one of the nodes it is given, bind posts the binding. It watches nothing,
// keeps no state and records nothing on the pod. What extender mode costs
// beyond it is what gpushare-extender computes and watches; what it costs
// beyond stock kube-scheduler is the extender protocol itself (a second
// process, an HTTPS round trip per pod in kube-scheduler's scheduling
// loop, the binding from a second client).
//
// With --follow and --record it also does what any extender that books
// GPUs must do, and still computes nothing: it follows the cluster's pods
// and nodes with informers, as gpushare-extender does (which also
// watches Leases and ResourceClaims, and books what it sees), and its binding
// carries an allocation record of the size gpushare-extender writes (the
// node bound to, one GPU, the pod's memory). That is the floor under an
// extender that keeps its own record of the GPUs; what gpushare-extender
// costs beyond it is its filter's rating, its bookings and its checks.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/extender"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nullextender:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		kubeconfig, cert, key, clientCA string
		port, healthzPort, qps          int
		follow, record                  bool
	)
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the client that posts bindings")
	flag.IntVar(&port, "port", 0, "port for the verbs, on 127.0.0.1")
	flag.IntVar(&healthzPort, "healthz-port", 0, "port for plain /healthz, on 127.0.0.1")
	flag.StringVar(&cert, "tls-cert-file", "", "serving certificate")
	flag.StringVar(&key, "tls-private-key-file", "", "serving key")
	flag.StringVar(&clientCA, "client-ca-file", "", "CA of the client certificates accepted")
	flag.IntVar(&qps, "kube-api-qps", 5000, "client QPS and burst")
	flag.BoolVar(&follow, "follow", false, "follow the cluster's pods and nodes with informers, as gpushare-extender's; /healthz fails until they have synced")
	flag.BoolVar(&record, "record", false, "bind with an allocation record of gpushare-extender's size (needs --follow, for the pod's request)")
	flag.Parse()
	if kubeconfig == "" || port == 0 || healthzPort == 0 {
		return errors.New("--kubeconfig, --port and --healthz-port are required")
	}
	if record && !follow {
		return errors.New("--record needs --follow: the record is made from the pod the informer holds")
	}
	tlsConfig, err := extender.Serving{Address: "127.0.0.1", CertFile: cert, KeyFile: key, ClientCAFile: clientCA}.TLSConfig()
	if err != nil {
		return err
	}
	if tlsConfig == nil {
		return errors.New("--tls-cert-file, --tls-private-key-file and --client-ca-file are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// As gpushare-extender's client: protobuf, no gzip.
	cfg.QPS, cfg.Burst = float32(qps), qps
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.DisableCompression = true
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// records is where bind reads the pod to record, with --record.
	var records corelisters.PodLister
	synced := func() bool { return true }
	if follow {
		factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(gpucache.DropManagedFields))
		if record {
			records = factory.Core().V1().Pods().Lister()
		}
		podsSynced := factory.Core().V1().Pods().Informer().HasSynced
		nodesSynced := factory.Core().V1().Nodes().Informer().HasSynced
		synced = func() bool { return podsSynced() && nodesSynced() }
		factory.Start(ctx.Done())
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /gpushare-scheduler/filter", filter)
	mux.HandleFunc("POST /gpushare-scheduler/bind", func(w http.ResponseWriter, r *http.Request) { bind(w, r, client, records) })
	// The benchmark's --cpu-profile asks for these.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	servers := []*http.Server{
		{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Handler: mux, TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second},
		{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(healthzPort)), ReadHeaderTimeout: 10 * time.Second,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if !synced() {
					http.Error(w, "informers not synced", http.StatusServiceUnavailable)
					return
				}
				_, _ = io.WriteString(w, "ok")
			})},
	}
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			if s.TLSConfig != nil {
				errc <- s.ListenAndServeTLS("", "")
				return
			}
			errc <- s.ListenAndServe()
		}()
	}
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	for _, s := range servers {
		_ = s.Close()
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

var nodeNamesKey = []byte(`"NodeNames":["`)

// calls counts filter calls.
var calls atomic.Uint64

// filter passes the pod on one of the node names kube-scheduler sends
// (nodeCacheCapable), found without decoding the rest of the body: the
// k-th name of the k-th call, round the list. Pods spread over the nodes
// as stock kube-scheduler spreads them; passed on the first name, they
// would pile onto a few nodes, as no real scheduler would place them.
func filter(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var name []byte
	if _, rest, found := bytes.Cut(body, nodeNamesKey); found {
		list, _, _ := bytes.Cut(rest, []byte("]"))
		k := calls.Add(1) % uint64(bytes.Count(list, []byte(","))+1)
		for n := range bytes.SplitSeq(list, []byte(",")) {
			if k == 0 {
				name = bytes.Trim(n, `"`)
				break
			}
			k--
		}
	}
	var result struct {
		NodeNames []string `json:"NodeNames"`
		Error     string   `json:"Error,omitempty"`
	}
	if len(name) == 0 {
		result.Error = "no node names in the filter call"
	} else {
		result.NodeNames = []string{string(name)}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(result)
}

// bind posts the binding kube-scheduler asks for; with pods, carrying
// the pod's allocation record.
func bind(w http.ResponseWriter, r *http.Request, client kubernetes.Interface, pods corelisters.PodLister) {
	var args struct {
		PodName, PodNamespace, Node string
		PodUID                      types.UID
	}
	var result struct {
		Error string `json:"Error,omitempty"`
	}
	err := json.NewDecoder(r.Body).Decode(&args)
	if err == nil {
		binding := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: args.PodName, Namespace: args.PodNamespace, UID: args.PodUID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: args.Node},
		}
		if pods != nil {
			binding.Annotations, err = recordOf(pods, args.PodNamespace, args.PodName, args.Node)
		}
		if err == nil {
			err = client.CoreV1().Pods(args.PodNamespace).Bind(r.Context(), binding, metav1.CreateOptions{})
		}
	}
	if err != nil {
		result.Error = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(result)
}

// gpuMemory is what the bench's pods ask in extender mode.
const gpuMemory corev1.ResourceName = "gpushare.io/gpu-mem"

// recordOf is the allocation annotation of a pod bound to node, made
// from the pod the informer holds: its memory on GPU 7 of node, as
// gpushare-extender records a fractional pod. The bench's pods have one
// container; the memory of all is given to the first. A pod that asks no
// GPU memory gets no record, as from gpushare-extender. It reads the
// informer alone: the bench's pods exist before the extender starts, and
// its /healthz waits for the informers to sync.
func recordOf(pods corelisters.PodLister, namespace, name, node string) (map[string]string, error) {
	pod, err := pods.Pods(namespace).Get(name)
	if err != nil {
		return nil, err
	}
	var mib int64
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[gpuMemory]; ok {
			mib += q.Value()
		}
	}
	if mib <= 0 {
		return nil, nil
	}
	value, err := gpusharev1.Marshal(&gpusharev1.Allocation{Node: node, Containers: []gpusharev1.ContainerAllocation{{
		Name: pod.Spec.Containers[0].Name, Kind: gpusharev1.ContainerApp,
		GPUs: []gpusharev1.GPUShare{{Index: 7, UUID: "GPU-" + node + "-7", MemoryMiB: mib}},
	}}, Asked: &gpusharev1.Asked{}})
	if err != nil {
		return nil, err
	}
	return map[string]string{gpusharev1.AllocationAnnotation: value}, nil
}
