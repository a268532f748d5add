package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/controlplane"
)

// deployTLSDir is where deploy/extender-scheduler-config.yaml has
// kube-scheduler read its extender TLS files.
const deployTLSDir = "/etc/kubernetes/gpushare-extender/"

// secureExtender is gpushare-extender serving mutual TLS on loopback, as
// deploy/extender-scheduler-config.yaml expects it.
type secureExtender struct {
	// base is https://127.0.0.1:port.
	base string
	// dir holds ca.crt and kube-scheduler's scheduler.crt and .key.
	dir string
	ca  *controlplane.CA
	// client presents kube-scheduler's client certificate.
	client *http.Client
	proc   *controlplane.Process
}

// startSecureExtender runs gpushare-extender with a serving certificate
// for 127.0.0.1 and --client-ca-file, accepting the client certificate
// named kube-scheduler, and waits until its plain /healthz port is ready.
func startSecureExtender(t *testing.T, c *controlplane.Cluster, extra ...string) *secureExtender {
	t.Helper()
	return startSecureExtenderWith(t, c, nil, extra...)
}

// startSecureExtenderWith is startSecureExtender with environment
// variables env set; with env, it gets no --kubeconfig flag.
func startSecureExtenderWith(t *testing.T, c *controlplane.Cluster, env []string, extra ...string) *secureExtender {
	t.Helper()
	e := &secureExtender{dir: t.TempDir()}
	var err error
	if e.ca, err = controlplane.NewCA("gpushare-test-ca"); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(e.dir, "ca.crt")
	if err := os.WriteFile(caFile, e.ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key, err := e.ca.IssueFiles(e.dir, "extender", "gpushare-extender", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.ca.IssueFiles(e.dir, "scheduler", "kube-scheduler"); err != nil {
		t.Fatal(err)
	}
	e.client = e.clientWith(t, e.ca, "kube-scheduler")
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	health, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e.base = "https://127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"--port=" + strconv.Itoa(port), "--healthz-port=" + strconv.Itoa(health),
		"--config=" + root + "/deploy/extender-config.yaml", "-v=2",
		"--tls-cert-file=" + cert, "--tls-private-key-file=" + key,
		"--client-ca-file=" + caFile, "--client-allowed-names=kube-scheduler"}, extra...)
	bin := extenderBin
	if env == nil {
		args = append([]string{"--kubeconfig=" + accountKubeconfig(t, c, "extender")}, args...)
	} else {
		// env(1) execs the extender in its own process.
		if bin, err = exec.LookPath("env"); err != nil {
			t.Fatal(err)
		}
		args = append(append(env, extenderBin), args...)
	}
	if e.proc, err = c.Run("gpushare-extender", bin, args...); err != nil {
		t.Fatal(err)
	}
	notForbidden(t, e.proc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := controlplane.WaitHTTP(ctx, e.proc, "http://127.0.0.1:"+strconv.Itoa(health)+"/healthz", ""); err != nil {
		t.Fatal(err)
	}
	return e
}

// clientWith returns a client that trusts the extender's CA and presents
// a certificate for cn signed by ca (none if ca is nil).
func (e *secureExtender) clientWith(t *testing.T, ca *controlplane.CA, cn string) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(e.ca.CertPEM)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if ca != nil {
		certPEM, keyPEM, err := ca.Issue(cn)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// schedulerConfig is deploy/extender-scheduler-config.yaml with this
// extender's address and TLS files.
func (e *secureExtender) schedulerConfig(t *testing.T) []byte {
	t.Helper()
	config := readFile(t, "deploy/extender-scheduler-config.yaml")
	for _, s := range []string{"https://127.0.0.1:8888", deployTLSDir} {
		if !bytes.Contains(config, []byte(s)) {
			t.Fatalf("deploy/extender-scheduler-config.yaml no longer has %s", s)
		}
	}
	config = bytes.ReplaceAll(config, []byte("https://127.0.0.1:8888"), []byte(e.base))
	return bytes.ReplaceAll(config, []byte(deployTLSDir), []byte(e.dir+"/"))
}

// startScheduler runs stock kube-scheduler with schedulerConfig.
func (e *secureExtender) startScheduler(t *testing.T, c *controlplane.Cluster) {
	t.Helper()
	if _, err := c.StartScheduler(context.Background(), "kube-scheduler", tools.Bin("kube-scheduler"), e.schedulerConfig(t)); err != nil {
		t.Fatal(err)
	}
}

// post sends v as JSON to the verb with client.
func (e *secureExtender) post(client *http.Client, verb string, v any) (*http.Response, []byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	resp, err := client.Post(e.base+"/gpushare-scheduler/"+verb, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	return resp, out, err
}

// bind asks the extender to bind pod to node with client and returns the
// answer's Error.
func (e *secureExtender) bind(t *testing.T, client *http.Client, pod *corev1.Pod, node string) string {
	t.Helper()
	resp, body, err := e.post(client, "bind", extenderv1.ExtenderBindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: node})
	if err != nil {
		t.Fatalf("bind %s onto %s: %v", pod.Name, node, err)
	}
	var res extenderv1.ExtenderBindingResult
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &res) != nil {
		t.Fatalf("bind %s onto %s: %d %s", pod.Name, node, resp.StatusCode, body)
	}
	return res.Error
}

// filter asks the extender to filter nodes for pod, until it passes them
// all (its informer may not have the nodes yet).
func (e *secureExtender) filter(t *testing.T, pod *corev1.Pod, nodes ...string) {
	t.Helper()
	var last string
	err := waitFor(30*time.Second, func() (bool, error) {
		resp, body, err := e.post(e.client, "filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes})
		if err != nil {
			return false, err
		}
		var res extenderv1.ExtenderFilterResult
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &res) != nil || res.NodeNames == nil {
			return false, fmt.Errorf("filter: %d %s", resp.StatusCode, body)
		}
		last = strings.Join(*res.NodeNames, ",")
		return last == strings.Join(nodes, ","), nil
	})
	if err != nil {
		t.Fatalf("filter of %s passed %q, want %v: %v", pod.Name, last, nodes, err)
	}
}

// unbound fails the test if the pod is bound or carries a record.
func unbound(t *testing.T, client kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	got, err := client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "" || got.Annotations[gpusharev1.AllocationAnnotation] != "" {
		t.Errorf("pod %s was bound to %q with record %q", pod.Name, got.Spec.NodeName, got.Annotations[gpusharev1.AllocationAnnotation])
	}
}

// TestExtenderRefusesClientsWithoutCertificate: with --client-ca-file, a
// POST to /bind without a client certificate, with one of another CA, or
// with one whose name is not allowed fails in the TLS handshake, and the
// pod stays unbound; kube-scheduler's certificate gets through.
func TestExtenderRefusesClientsWithoutCertificate(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	e := startSecureExtender(t, c)
	createNodes(t, client, controlplane.NodeSpec{Name: "g1", Model: "NVIDIA GPU", MemoryMiB: 16384, Count: 1})
	pod, err := client.CoreV1().Pods("default").Create(context.Background(), gpuPod("victim", 1024, 0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := controlplane.NewCA("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	args := extenderv1.ExtenderBindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: "g1"}
	for name, cl := range map[string]*http.Client{
		"no certificate":         e.clientWith(t, nil, ""),
		"another CA's":           e.clientWith(t, other, "kube-scheduler"),
		"a name not allowed":     e.clientWith(t, e.ca, "tenant"),
		"no certificate, no TLS": {Timeout: 10 * time.Second},
		"no certificate, any CA": {Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}, //nolint:gosec // the attacker's client
	} {
		base := e.base
		if name == "no certificate, no TLS" {
			base = strings.Replace(base, "https://", "http://", 1)
		}
		body, _ := json.Marshal(args)
		resp, err := cl.Post(base+"/gpushare-scheduler/bind", "application/json", bytes.NewReader(body))
		if err == nil {
			out, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if name == "no certificate, no TLS" && resp.StatusCode == http.StatusBadRequest && strings.Contains(string(out), "HTTP request to an HTTPS server") {
				continue
			}
			t.Errorf("%s: answered %d %s; want a TLS handshake failure", name, resp.StatusCode, out)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	time.Sleep(time.Second)
	unbound(t, client, pod)
	// The same call with kube-scheduler's certificate reaches bind (and is
	// refused there: no filter call for the pod).
	if got := e.bind(t, e.client, pod, "g1"); !strings.Contains(got, "no recent filter call") {
		t.Errorf("bind with kube-scheduler's certificate: %q", got)
	}
}

// TestExtenderBindRefusals: a client with a valid certificate still
// cannot bind a pod of another scheduler, nor a pod onto a node the
// latest filter call for it did not pass, nor a pod filter was never
// asked about; the pods stay unbound. The node filter passed binds.
func TestExtenderBindRefusals(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	e := startSecureExtender(t, c)
	createNodes(t, client,
		controlplane.NodeSpec{Name: "g1", Model: "NVIDIA GPU", MemoryMiB: 16384, Count: 1},
		controlplane.NodeSpec{Name: "whole", Model: "NVIDIA GPU", MemoryMiB: 81920, Count: 1, WholeCard: true})
	ctx := context.Background()
	create := func(p *corev1.Pod) *corev1.Pod {
		t.Helper()
		got, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// No kube-scheduler runs: pods stay pending unless the extender binds.
	foreign := gpuPod("foreign", 1024, 0)
	foreign.Spec.SchedulerName = "no-such-scheduler"
	foreign = create(foreign)
	e.filter(t, foreign, "g1")
	if got := e.bind(t, e.client, foreign, "g1"); !strings.Contains(got, `schedulerName "no-such-scheduler"`) {
		t.Errorf("bind of another scheduler's pod: %q", got)
	}
	mine := create(gpuPod("mine", 1024, 0))
	if got := e.bind(t, e.client, mine, "g1"); !strings.Contains(got, "no recent filter call") {
		t.Errorf("bind without a filter call: %q", got)
	}
	e.filter(t, mine, "g1")
	if got := e.bind(t, e.client, mine, "whole"); !strings.Contains(got, "did not pass node whole") {
		t.Errorf("bind onto a node filter did not pass: %q", got)
	}
	time.Sleep(time.Second)
	unbound(t, client, foreign)
	unbound(t, client, mine)
	if got := e.bind(t, e.client, mine, "g1"); got != "" {
		t.Fatalf("bind onto the node filter passed: %q", got)
	}
	if got := boundPod(t, client, "default", "mine"); got.Spec.NodeName != "g1" {
		t.Errorf("mine bound to %s, want g1", got.Spec.NodeName)
	}
}

// TestExtenderStartup: started as an operator might, without TLS flags,
// the extender refuses to serve (on loopback too: beside kube-scheduler it
// is in the host network, where every host-network pod reaches it) and
// says which flags it needs; and it finds its API credentials as
// kube-scheduler does, here in $KUBECONFIG with no --kubeconfig flag.
func TestExtenderStartup(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	config := "--config=" + root + "/deploy/extender-config.yaml"
	plain, err := c.Run("gpushare-extender-plain", extenderBin, "--kubeconfig="+accountKubeconfig(t, c, "extender"), config)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(30*time.Second, func() (bool, error) { return plain.Exited(), nil }); err != nil {
		t.Fatalf("the extender serves without client certificates:\n%s", plain.Tail(2048))
	}
	if log := plain.Tail(4096); !strings.Contains(log, `refusing to serve without client certificates on \"127.0.0.1\"`) ||
		!strings.Contains(log, "--client-ca-file") {
		t.Errorf("the extender stopped (%v) without saying why in flags:\n%s", plain.Cmd.ProcessState, log)
	}

	// $KUBECONFIG, as client-go's loading rules read it: the extender
	// sees the node through it and passes a pod that fits there.
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	createNodes(t, client, controlplane.NodeSpec{Name: "t4", Model: "Tesla T4", MemoryMiB: 15360, Count: 1})
	e := startSecureExtenderWith(t, c, []string{"KUBECONFIG=" + accountKubeconfig(t, c, "extender")})
	e.filter(t, gpuPod("p", 1024, 0), "t4")
}
