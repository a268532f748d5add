package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/quota"
)

// teams runs gpushare-webhook, gives two teams a GPU quota
// (o.teams/quotas.yaml) and creates their pods (o.teams/pods.yaml) one by
// one, saying what each is charged or why it is refused; then it shows
// kubectl inspect gpushare quota. It comes after the seed examples,
// whose pods are created before the webhook and keep their specs as
// written.
func teams(ctx context.Context, c *controlplane.Cluster, client kubernetes.Interface, o options, schedulerConfig []byte) error {
	rbac, err := os.ReadFile(o.webhookRBAC)
	if err != nil {
		return err
	}
	manifest, err := os.ReadFile(o.quotaWebhook)
	if err != nil {
		return err
	}
	step("applying " + o.webhookRBAC + ", starting gpushare-webhook as its service account and registering " + o.quotaWebhook +
		": each new GPU pod is charged its GPU memory and compute (" + quota.MemoryResource + ", " + quota.ComputeResource + ")")
	kubeconfig, err := c.RoleKubeconfig(ctx, rbac, "kube-system", "gpushare-webhook", daemonTokenTTL)
	if err != nil {
		return fmt.Errorf("%s: %w", o.webhookRBAC, err)
	}
	args, err := argsYAML(schedulerConfig)
	if err != nil {
		return err
	}
	argsFile := filepath.Join(o.dir, "gpushare-args.yaml")
	if err := os.WriteFile(argsFile, args, 0o644); err != nil {
		return err
	}
	if _, err := c.StartQuotaWebhook(ctx, controlplane.QuotaWebhook{Bin: o.webhook, Kubeconfig: kubeconfig, Args: argsFile, Manifest: manifest}); err != nil {
		return err
	}
	if err := writePIDs(c); err != nil {
		return err
	}
	quotas := filepath.Join(o.teams, "quotas.yaml")
	b, err := os.ReadFile(quotas)
	if err != nil {
		return err
	}
	step("applying " + quotas + ": ResourceQuotas on the charges for team-a and team-b")
	if err := controlplane.Apply(ctx, client, b); err != nil {
		return fmt.Errorf("%s: %w", quotas, err)
	}
	if err := waitQuotas(ctx, client, "team-a", "team-b"); err != nil {
		return err
	}
	podsFile := filepath.Join(o.teams, "pods.yaml")
	if b, err = os.ReadFile(podsFile); err != nil {
		return err
	}
	step("creating the pods of " + podsFile + ", one by one")
	pods, err := decodePods(b)
	if err != nil {
		return fmt.Errorf("%s: %w", podsFile, err)
	}
	for _, p := range pods {
		got, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			fmt.Printf("    %s/%s: refused: %v\n", p.Namespace, p.Name, err)
			continue
		}
		r := got.Spec.Containers[0].Resources.Requests
		mem, cpu := r[quota.MemoryResource], r[quota.ComputeResource]
		fmt.Printf("    %s/%s: created, charged %s of GPU memory and %s%% of a GPU's compute\n", p.Namespace, p.Name, mem.String(), cpu.String())
	}
	gangsFile := filepath.Join(o.teams, "gangs.yaml")
	if b, err = os.ReadFile(gangsFile); err != nil {
		return err
	}
	step("applying " + gangsFile + ": two PodGroups whose pods are placed all together or not at all")
	if err := controlplane.Apply(ctx, client, b); err != nil {
		return fmt.Errorf("%s: %w", gangsFile, err)
	}
	step("waiting for the teams' pods to be scheduled")
	if _, err := settle(ctx, client); err != nil {
		return err
	}
	return printInspectViews(ctx, c.Kubeconfig, []string{"gangs"}, []string{"quota"})
}

// waitQuotas waits until the quota controller has counted each
// namespace's quotas: until then the API server refuses its pods.
func waitQuotas(ctx context.Context, client kubernetes.Interface, namespaces ...string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		counted := true
		for _, ns := range namespaces {
			list, err := client.CoreV1().ResourceQuotas(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, q := range list.Items {
				counted = counted && q.Status.Hard != nil
			}
		}
		if counted {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the quotas of %v were not counted within a minute", namespaces)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// decodePods reads the pods of a multi-document manifest.
func decodePods(b []byte) ([]*corev1.Pod, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var pods []*corev1.Pod
	for {
		p := &corev1.Pod{}
		err := dec.Decode(p)
		switch {
		case errors.Is(err, io.EOF):
			return pods, nil
		case err != nil:
			return nil, err
		case p.Kind == "" && p.Name == "":
			continue
		case p.Kind != "Pod":
			return nil, fmt.Errorf("want pods only, got a %s", p.Kind)
		}
		pods = append(pods, p)
	}
}
