package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// QuotaWebhook says how to run gpushare-webhook beside the cluster.
type QuotaWebhook struct {
	// Bin is the gpushare-webhook binary; Kubeconfig its credentials
	// (RoleKubeconfig with deploy/webhook-rbac.yaml); Args its
	// GPUShareArgs file.
	Bin, Kubeconfig, Args string
	// Manifest is deploy/quota-webhook.yaml: its
	// MutatingWebhookConfiguration is registered, its service swapped
	// for the webhook's URL on loopback and its caBundle for the CA
	// made here.
	Manifest []byte
}

// Webhook is a running gpushare-webhook.
type Webhook struct {
	*Process
	// URL is its HTTPS base: /quota, /metrics.
	URL string
}

// StartQuotaWebhook runs gpushare-webhook on loopback with a certificate
// of a CA of its own, waits until it serves, and registers it.
func (c *Cluster) StartQuotaWebhook(ctx context.Context, w QuotaWebhook) (*Webhook, error) {
	dir := filepath.Join(c.Dir, "quota-webhook")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := NewCA("gpushare-webhook-ca")
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.IssueFiles(dir, "webhook", "gpushare-webhook", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	cfg, err := quotaWebhookConfig(w.Manifest)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	p, err := c.Run("gpushare-webhook", w.Bin, "--kubeconfig="+w.Kubeconfig, "--bind-address=127.0.0.1",
		"--port="+strconv.Itoa(ports[0]), "--healthz-port="+strconv.Itoa(ports[1]),
		"--tls-cert-file="+cert, "--tls-private-key-file="+key, "--config="+w.Args, "-v=2")
	if err != nil {
		return nil, err
	}
	if err := WaitHTTP(ctxTimeout(ctx, time.Minute), p, "http://"+hostPort(ports[1])+"/healthz", ""); err != nil {
		return nil, err
	}
	base := "https://" + hostPort(ports[0])
	url := base + "/quota"
	cfg.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.CertPEM}
	client, err := c.Client()
	if err != nil {
		return nil, err
	}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("registering the quota webhook: %w", err)
	}
	return &Webhook{Process: p, URL: base}, nil
}

// quotaWebhookConfig is the one MutatingWebhookConfiguration of manifest,
// whose caBundle may be deploy/'s placeholder.
func quotaWebhookConfig(manifest []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	data := bytes.ReplaceAll(manifest, []byte("caBundle: CA_BUNDLE_BASE64"), []byte(`caBundle: ""`))
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj admissionregistrationv1.MutatingWebhookConfiguration
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("no MutatingWebhookConfiguration in the quota webhook's manifest: %w", err)
		}
		if obj.Kind != "MutatingWebhookConfiguration" {
			continue
		}
		if len(obj.Webhooks) != 1 {
			return nil, fmt.Errorf("the quota webhook's configuration has %d webhooks, want 1", len(obj.Webhooks))
		}
		return &obj, nil
	}
}
