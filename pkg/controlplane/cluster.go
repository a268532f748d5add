package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options configure Start.
type Options struct {
	// Tools are the binaries; FindTools("") if zero.
	Tools Tools
	// Dir keeps state, logs and the kubeconfig; a new temporary
	// directory if empty (removed by Stop).
	Dir string
	// NoKwok leaves kwok out: nodes then stay as created.
	NoKwok bool
	// ControllerManagerArgs are added to kube-controller-manager's, e.g.
	// --controllers=*,-node-lifecycle-controller to keep nodes without
	// kwok Ready.
	ControllerManagerArgs []string
	// APIServerArgs are added to kube-apiserver's, e.g. WorkloadAPI.
	APIServerArgs []string
	// JobPodsRun keeps the pods of Jobs running: kwok otherwise
	// completes them as soon as they run.
	JobPodsRun bool
	// NodeLeases has kwok renew a Lease for each node it manages, as a
	// kubelet does. Without them a node's health rests on kwok's status
	// heartbeat alone (every 20 s plus up to 25 s of jitter, against
	// kube-controller-manager's 50 s grace): a stall of a few seconds,
	// or kwok's restart, turns nodes NotReady, and kwok never makes
	// their pods Ready again. For long-lived clusters (the demo); a
	// write per node every 5 s is load a cluster of a thousand nodes
	// does without.
	NodeLeases bool
	// QPS and Burst of the clients the cluster hands out; 0 means 500/1000.
	QPS   float32
	Burst int
}

// WorkloadAPI are the flags that serve 1.37's Workload and PodGroup API
// (beta, off by default): kube-apiserver's, and with the gate alone
// gpushare-scheduler's, which then schedules a PodGroup's pods together,
// and kube-controller-manager's, which then removes the finalizer the
// API server puts on each PodGroup once its pods are gone.
var WorkloadAPI = []string{"--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"}

// Cluster is a running control plane.
type Cluster struct {
	Tools Tools
	// Dir holds the state; Kubeconfig is the admin kubeconfig in it, and
	// SchedulerKubeconfig the scheduler's: user system:kube-scheduler, as
	// kubeadm's scheduler.conf, which deploy/allocation-policy.yaml lets
	// write allocation records (an admin is refused).
	Dir                 string
	Kubeconfig          string
	SchedulerKubeconfig string
	// Host is the apiserver's URL and Token the admin bearer token.
	Host  string
	Token string

	ownDir bool
	// kubeletClientCA is the CA file kubelets trust the apiserver's
	// client certificate by; nodes are the real nodes started.
	kubeletClientCA string
	nodes           []*RealNode
	qps             float32
	burst           int
	procs           []*Process
	// apiArgs are kube-apiserver's flags and apiIndex its place in procs,
	// for RestartAPIServer; apiRestarts counts the restarts.
	apiArgs     []string
	apiIndex    int
	apiRestarts int
}

// Start starts etcd, kube-apiserver, kube-controller-manager and kwok and
// waits until they are ready. On error it stops what it started.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	c := &Cluster{Tools: o.Tools, Dir: o.Dir, qps: o.QPS, burst: o.Burst}
	if c.qps == 0 {
		c.qps, c.burst = 500, 1000
	}
	if c.Tools.Dir == "" {
		if c.Tools, err = FindTools(""); err != nil {
			return nil, err
		}
	}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "gpushare-cluster-"); err != nil {
			return nil, err
		}
		c.ownDir = true
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, kcmPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	if err := c.startEtcd(ctx, etcdPort, peerPort); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx, apiPort, etcdPort, o.APIServerArgs); err != nil {
		return nil, err
	}
	if err := c.startControllerManager(ctx, kcmPort, o.ControllerManagerArgs); err != nil {
		return nil, err
	}
	if !o.NoKwok {
		if err := c.startKwok(kwokPort, o); err != nil {
			return nil, err
		}
	}
	if err := c.waitDefaultServiceAccount(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.Dir}, parts...)...)
}

func (c *Cluster) startEtcd(ctx context.Context, port, peer int) error {
	client, peerURL := "http://"+hostPort(port), "http://"+hostPort(peer)
	p, err := start(c.Dir, "etcd", c.Tools.Bin("etcd"),
		"--name=default", "--data-dir="+c.path("etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync", "--quota-backend-bytes=4294967296")
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return WaitHTTP(ctxTimeout(ctx, time.Minute), p, client+"/health", "")
}

func (c *Cluster) startAPIServer(ctx context.Context, port, etcdPort int, extraArgs []string) error {
	if err := os.MkdirAll(c.path("pki"), 0o700); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(c.path("pki", "sa.key"), keyPEM, 0o600); err != nil {
		return err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	c.Token = hex.EncodeToString(tok)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	schedulerToken := hex.EncodeToString(tok)
	// The scheduler user has what Kubernetes' own roles give
	// kube-scheduler (system:kube-scheduler), as kubeadm's scheduler.conf.
	tokens := fmt.Sprintf("%s,admin,admin,system:masters\n%s,%s,%[3]s\n", c.Token, schedulerToken, SchedulerUser)
	if err := os.WriteFile(c.path("pki", "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return err
	}
	// A client CA makes the API server publish kube-system's
	// extension-apiserver-authentication ConfigMap, which kube-scheduler
	// reads at start and, without it, complains about every half minute.
	for _, name := range []string{"client-ca", "front-proxy-ca"} {
		ca, err := NewCA("gpushare-" + name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.path("pki", name+".crt"), ca.CertPEM, 0o600); err != nil {
			return err
		}
	}
	// The apiserver's client certificate for kubelets (exec, logs),
	// from a CA of its own that real nodes trust.
	kubeletCA, err := NewCA("gpushare-kubelet-client-ca")
	if err != nil {
		return err
	}
	c.kubeletClientCA = c.path("pki", "kubelet-client-ca.crt")
	if err := os.WriteFile(c.kubeletClientCA, kubeletCA.CertPEM, 0o600); err != nil {
		return err
	}
	kubeletCert, kubeletKey, err := kubeletCA.IssueFiles(c.path("pki"), "apiserver-kubelet-client", "kube-apiserver-kubelet-client")
	if err != nil {
		return err
	}
	c.Host = "https://" + hostPort(port)
	c.apiArgs = []string{
		"--kubelet-client-certificate=" + kubeletCert, "--kubelet-client-key=" + kubeletKey,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--client-ca-file=" + c.path("pki", "client-ca.crt"),
		"--requestheader-client-ca-file=" + c.path("pki", "front-proxy-ca.crt"), "--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
		"--etcd-servers=http://" + hostPort(etcdPort),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port), "--cert-dir=" + c.path("pki"),
		"--token-auth-file=" + c.path("pki", "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + c.path("pki", "sa.key"),
		"--service-account-signing-key-file=" + c.path("pki", "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
	}
	c.apiArgs = append(c.apiArgs, extraArgs...)
	p, err := start(c.Dir, "kube-apiserver", c.Tools.Bin("kube-apiserver"), c.apiArgs...)
	if err != nil {
		return err
	}
	c.apiIndex = len(c.procs)
	c.procs = append(c.procs, p)
	if err := WaitHTTP(ctxTimeout(ctx, 2*time.Minute), p, c.Host+"/readyz", c.Token); err != nil {
		return err
	}
	c.Kubeconfig = c.path("kubeconfig")
	c.SchedulerKubeconfig = c.path("scheduler.conf")
	if err := c.writeKubeconfig(c.SchedulerKubeconfig, SchedulerUser, schedulerToken); err != nil {
		return err
	}
	return c.writeKubeconfig(c.Kubeconfig, "admin", c.Token)
}

// RestartAPIServer kills kube-apiserver (SIGKILL: on SIGTERM it waits for
// its clients' long requests, half a minute and more) and starts it again
// with the same flags: the same port, etcd, keys and
// tokens, so that every client, and every token handed out, works again
// once it is back. It returns when the new one is ready. Its log is
// logs/kube-apiserver-N.log for the Nth restart. Not safe for use
// concurrently with Run or Stop.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	if c.apiArgs == nil {
		return errors.New("kube-apiserver was not started")
	}
	c.procs[c.apiIndex].Kill()
	c.apiRestarts++
	p, err := start(c.Dir, fmt.Sprintf("kube-apiserver-%d", c.apiRestarts), c.Tools.Bin("kube-apiserver"), c.apiArgs...)
	if err != nil {
		return err
	}
	c.procs[c.apiIndex] = p
	return WaitHTTP(ctxTimeout(ctx, 2*time.Minute), p, c.Host+"/readyz", c.Token)
}

// SchedulerUser is the user the cluster's schedulers run as.
const SchedulerUser = "system:kube-scheduler"

// writeKubeconfig writes a kubeconfig for user with token.
func (c *Cluster) writeKubeconfig(path, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gpushare"] = &clientcmdapi.Cluster{Server: c.Host, InsecureSkipTLSVerify: true}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["gpushare"] = &clientcmdapi.Context{Cluster: "gpushare", AuthInfo: user}
	cfg.CurrentContext = "gpushare"
	return clientcmd.WriteToFile(*cfg, path)
}

func (c *Cluster) startControllerManager(ctx context.Context, port int, extra []string) error {
	args := append([]string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig, "--authorization-kubeconfig=" + c.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--leader-elect=false",
		"--service-account-private-key-file=" + c.path("pki", "sa.key"),
		"--root-ca-file=" + c.path("pki", "apiserver.crt"),
		"--kube-api-qps=500", "--kube-api-burst=1000",
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10", "--concurrent-job-syncs=10",
	}, extra...)
	p, err := start(c.Dir, "kube-controller-manager", c.Tools.Bin("kube-controller-manager"), args...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return WaitHTTP(ctxTimeout(ctx, time.Minute), p, "https://"+hostPort(port)+"/healthz", "")
}

func (c *Cluster) startKwok(port int, o Options) error {
	b, err := os.ReadFile(c.Tools.KwokStages())
	if err != nil {
		return err
	}
	var kept []string
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		if o.JobPodsRun && strings.Contains(doc, "\n  name: pod-complete\n") {
			continue
		}
		if strings.Contains(doc, "\n  name: pod-ready\n") {
			// Pods labelled NotStartedLabel stay as a node that cannot
			// start them leaves them.
			doc = strings.Replace(doc, "\n    matchExpressions:\n", "\n    matchExpressions:\n"+
				"    - key: '.metadata.labels[\""+NotStartedLabel+"\"]'\n      operator: 'DoesNotExist'\n", 1)
		}
		kept = append(kept, doc)
	}
	stages := c.path("kwok-stages.yaml")
	if err := os.WriteFile(stages, []byte(strings.Join(kept, "\n---\n")), 0o600); err != nil {
		return err
	}
	args := []string{"--kubeconfig=" + c.Kubeconfig, "--config=" + stages,
		"--manage-nodes-with-annotation-selector=" + KwokAnnotation + "=fake", "--server-address=" + hostPort(port),
		"--node-ip=127.0.0.1"}
	if o.NodeLeases {
		// kwok renews at a quarter of the duration. A restarted kwok
		// (another holder) takes a lease over once it has expired:
		// 20 s keeps that, and a renewal after it, well inside the
		// controller manager's 50 s grace.
		args = append(args, "--node-lease-duration-seconds=20")
	}
	p, err := start(c.Dir, "kwok", c.Tools.Bin("kwok"), args...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return nil
}

// waitDefaultServiceAccount waits for kube-controller-manager to create the
// default ServiceAccount, without which pods are rejected.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context) error {
	client, err := c.Client()
	if err != nil {
		return err
	}
	ctx = ctxTimeout(ctx, time.Minute)
	for {
		if _, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("kube-controller-manager did not create the default ServiceAccount in time")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RESTConfig returns an admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{Host: c.Host, BearerToken: c.Token, QPS: c.qps, Burst: c.burst,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// Client returns an admin clientset.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(c.RESTConfig())
}

// Run starts another process next to the control plane (a scheduler, an
// extender); Stop stops it with the rest.
func (c *Cluster) Run(name, bin string, args ...string) (*Process, error) {
	p, err := start(c.Dir, name, bin, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// Processes returns what the cluster started, in start order.
func (c *Cluster) Processes() []*Process { return append([]*Process(nil), c.procs...) }

// Stop stops every process the cluster started, newest first, and removes
// its directory if Start made it.
func (c *Cluster) Stop() {
	for i := len(c.nodes) - 1; i >= 0; i-- {
		c.nodes[i].stop()
	}
	c.nodes = nil
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].Stop(10 * time.Second)
	}
	c.procs = nil
	if c.ownDir {
		_ = os.RemoveAll(c.Dir)
	}
}

// ctxTimeout bounds ctx; the timer is released when ctx ends.
func ctxTimeout(ctx context.Context, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(ctx, d)
	go func() { <-ctx.Done(); cancel() }()
	return ctx
}
