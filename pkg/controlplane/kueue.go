package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// KueueNamespace is where Kueue keeps its own objects.
const KueueNamespace = "kueue-system"

// StartKueue installs Kueue from dir (hack/kueue.sh: the kueue binary,
// crds/ and webhooks.yaml), as its release manifests would: its CRDs, then
// its manager, with the Job integration alone, on loopback with a
// certificate of a CA of its own, and then its admission webhooks for
// Jobs and its own objects, which mark a new Job of a queue suspended
// until Kueue admits it. Other webhooks (pods, Deployments, the
// frameworks of other projects) are left out, as the integrations are.
//
// extraConfig is appended to Kueue's Configuration: e.g. its resources
// section (examples/teams/kueue-resources.yaml).
func (c *Cluster) StartKueue(ctx context.Context, dir string, extraConfig []byte) (*Process, error) {
	kubectl := func(args ...string) error {
		cmd := exec.CommandContext(ctx, c.Tools.Bin("kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl %v: %w: %s", args, err, out)
		}
		return nil
	}
	if err := kubectl("apply", "--server-side", "-f", filepath.Join(dir, "crds")); err != nil {
		return nil, err
	}
	if err := kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", filepath.Join(dir, "crds")); err != nil {
		return nil, err
	}
	client, err := c.Client()
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	state := filepath.Join(c.Dir, "kueue")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	ca, err := NewCA("kueue-webhook-ca")
	if err != nil {
		return nil, err
	}
	// controller-runtime's webhook server reads tls.crt and tls.key.
	if _, _, err := ca.IssueFiles(state, "tls", "kueue-webhook", "127.0.0.1"); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: 127.0.0.1:%d
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks: ["batch/job"]
`, KueueNamespace, ports[0], ports[1], ports[2], state)
	configFile := filepath.Join(state, "config.yaml")
	if err := os.WriteFile(configFile, append([]byte(config), extraConfig...), 0o600); err != nil {
		return nil, err
	}
	// Without its own certificate management, Kueue's manager reads its
	// metrics certificate from /etc/kueue/metrics/certs, a path no flag
	// changes: it runs in a mount namespace of its own whose /etc is a
	// tmpfs holding that directory alone (it reads nothing else there:
	// it reaches the API server by address, trusting the kubeconfig's
	// CA). Nothing outside the namespace changes; the shell execs kueue,
	// so the PID stopped is kueue's. The visibility API server would
	// listen on every address: off.
	if _, _, err := ca.IssueFiles(state, "metrics", "kueue-metrics", "127.0.0.1"); err != nil {
		return nil, err
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("kueue runs in a mount namespace of its own: %w", err)
	}
	script := `set -e
mount -t tmpfs tmpfs /etc
mkdir -p /etc/kueue/metrics/certs
cp "$1/metrics.crt" /etc/kueue/metrics/certs/tls.crt
cp "$1/metrics.key" /etc/kueue/metrics/certs/tls.key
shift
exec "$@"`
	p, err := c.Run("kueue", unshare, "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", state,
		filepath.Join(dir, "kueue"), "--config="+configFile, "--kubeconfig="+c.Kubeconfig,
		"--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2")
	if err != nil {
		return nil, err
	}
	if err := WaitHTTP(ctxTimeout(ctx, 2*time.Minute), p, "http://"+hostPort(ports[0])+"/readyz", ""); err != nil {
		return nil, fmt.Errorf("kueue: %w", err)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, "webhooks.yaml"))
	if err != nil {
		return nil, err
	}
	base := "https://" + hostPort(ports[2])
	mutating, validating, err := kueueWebhooks(manifest, base, ca.CertPEM)
	if err != nil {
		return nil, err
	}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("registering kueue's webhooks: %w", err)
	}
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("registering kueue's webhooks: %w", err)
	}
	return p, nil
}

// kueueWebhooks returns Kueue's webhook configurations with the webhooks
// for Jobs and Kueue's own objects alone, each calling base plus its path
// and trusting caPEM.
func kueueWebhooks(manifest []byte, base string, caPEM []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	pt := pointer{base: base, caPEM: caPEM}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kueue-mutating-webhook-configuration"}}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kueue-validating-webhook-configuration"}}
	docs := utilyaml.NewYAMLReader(bufioReader(manifest))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		var meta metav1.TypeMeta
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), 4096).Decode(&meta); err != nil {
			return nil, nil, err
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			err = keepWebhooks(doc, &mutating.Webhooks, pt, func(w *admissionregistrationv1.MutatingWebhook) ([]admissionregistrationv1.RuleWithOperations, *admissionregistrationv1.WebhookClientConfig) {
				return w.Rules, &w.ClientConfig
			})
		case "ValidatingWebhookConfiguration":
			err = keepWebhooks(doc, &validating.Webhooks, pt, func(w *admissionregistrationv1.ValidatingWebhook) ([]admissionregistrationv1.RuleWithOperations, *admissionregistrationv1.WebhookClientConfig) {
				return w.Rules, &w.ClientConfig
			})
		}
		if err != nil {
			return nil, nil, err
		}
	}
	if len(mutating.Webhooks) == 0 || len(validating.Webhooks) == 0 {
		return nil, nil, fmt.Errorf("kueue's webhooks: %d mutating and %d validating for Jobs and Kueue's objects, want some of each",
			len(mutating.Webhooks), len(validating.Webhooks))
	}
	return mutating, validating, nil
}

// pointer points a webhook at base plus its service path, trusting caPEM.
type pointer struct {
	base  string
	caPEM []byte
}

func (p pointer) point(cc *admissionregistrationv1.WebhookClientConfig) error {
	if cc.Service == nil || cc.Service.Path == nil {
		return errors.New("a kueue webhook without a service path")
	}
	url := p.base + *cc.Service.Path
	*cc = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: p.caPEM}
	return nil
}

// keepWebhooks decodes the webhooks of one configuration document and
// appends to into those whose rules name Jobs or Kueue's own objects,
// pointed by p; parts gives a webhook's rules and client configuration.
func keepWebhooks[W any](doc []byte, into *[]W, p pointer,
	parts func(*W) ([]admissionregistrationv1.RuleWithOperations, *admissionregistrationv1.WebhookClientConfig)) error {
	var cfg struct {
		Webhooks []W `json:"webhooks"`
	}
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), 4096).Decode(&cfg); err != nil {
		return err
	}
	for i := range cfg.Webhooks {
		rules, cc := parts(&cfg.Webhooks[i])
		if !slices.ContainsFunc(rules, func(r admissionregistrationv1.RuleWithOperations) bool {
			return slices.Contains(r.APIGroups, "batch") || slices.Contains(r.APIGroups, "kueue.x-k8s.io")
		}) {
			continue
		}
		if err := p.point(cc); err != nil {
			return err
		}
		*into = append(*into, cfg.Webhooks[i])
	}
	return nil
}
