package controlplane

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The service account gpushare-node runs as (deploy/node-rbac.yaml).
const (
	nodeDaemonNamespace = "kube-system"
	nodeDaemonAccount   = "gpushare-node"
)

// NodeDaemonKubeconfig gives node the credentials gpushare-node has there
// when deployed: it creates the daemon's pod on the node, as its
// DaemonSet would (service account kube-system/gpushare-node, which
// deploy/node-rbac.yaml creates), and writes a kubeconfig with a token
// bound to that pod, valid for ttl. Such a token names the node, and the
// policy of deploy/node-rbac.yaml lets it change that node alone. It
// returns the kubeconfig's path.
func (c *Cluster) NodeDaemonKubeconfig(ctx context.Context, node string, ttl time.Duration) (string, error) {
	client, err := c.Client()
	if err != nil {
		return "", err
	}
	pod, err := client.CoreV1().Pods(nodeDaemonNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: nodeDaemonAccount + "-" + node, Namespace: nodeDaemonNamespace,
			Labels: map[string]string{"app.kubernetes.io/name": nodeDaemonAccount}},
		Spec: corev1.PodSpec{ServiceAccountName: nodeDaemonAccount, NodeName: node,
			Containers: []corev1.Container{{Name: nodeDaemonAccount, Image: nodeDaemonAccount}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating the gpushare-node pod of node %s: %w", node, err)
	}
	return c.AccountKubeconfig(ctx, nodeDaemonNamespace, nodeDaemonAccount, pod, ttl)
}
