package controlplane

import (
	"bytes"
	"strings"
	"testing"
)

// TestKueueWebhooks: of Kueue's webhook manifest, only the webhooks of
// Jobs and Kueue's own objects are kept, each pointed at base plus its
// service path and trusting the CA given.
func TestKueueWebhooks(t *testing.T) {
	manifest := []byte(`---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjob.kb.io
  admissionReviewVersions: [v1]
  sideEffects: None
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
- name: mdeployment.kb.io
  admissionReviewVersions: [v1]
  sideEffects: None
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-apps-v1-deployment}}
  rules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: vclusterqueue.kb.io
  admissionReviewVersions: [v1]
  sideEffects: None
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-kueue-x-k8s-io-v1beta2-clusterqueue}}
  rules: [{apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE, UPDATE], resources: [clusterqueues]}]
`)
	m, v, err := kueueWebhooks(manifest, "https://127.0.0.1:9443", []byte("CA"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Webhooks) != 1 || m.Webhooks[0].Name != "mjob.kb.io" || *m.Webhooks[0].ClientConfig.URL != "https://127.0.0.1:9443/mutate-batch-v1-job" ||
		string(m.Webhooks[0].ClientConfig.CABundle) != "CA" || m.Webhooks[0].ClientConfig.Service != nil {
		t.Errorf("mutating: %+v", m.Webhooks)
	}
	if len(v.Webhooks) != 1 || *v.Webhooks[0].ClientConfig.URL != "https://127.0.0.1:9443/validate-kueue-x-k8s-io-v1beta2-clusterqueue" {
		t.Errorf("validating: %+v", v.Webhooks)
	}
	mutatingOnly := manifest[:bytes.LastIndex(manifest, []byte("---"))]
	if _, _, err := kueueWebhooks(mutatingOnly, "https://127.0.0.1:9443", nil); err == nil || !strings.Contains(err.Error(), "1 mutating and 0 validating") {
		t.Errorf("a manifest without validating webhooks: %v", err)
	}
}
