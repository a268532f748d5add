package controlplane

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AccountKubeconfig writes a kubeconfig with a token of the service
// account namespace/name, valid for ttl, and returns its path: the
// credentials a pod of that account has. With pod set, the token is bound
// to that pod, as the kubelet's are: it dies with the pod and, when the
// pod is bound to a node, names that node.
func (c *Cluster) AccountKubeconfig(ctx context.Context, namespace, name string, pod *corev1.Pod, ttl time.Duration) (string, error) {
	client, err := c.Client()
	if err != nil {
		return "", err
	}
	seconds := int64(ttl.Seconds())
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	file := "kubeconfig-" + namespace + "-" + name
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
		file += "-" + pod.Name
	}
	tok, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token for service account %s/%s: %w", namespace, name, err)
	}
	path := c.path(file)
	return path, c.writeKubeconfig(path, "system:serviceaccount:"+namespace+":"+name, tok.Status.Token)
}

// RoleKubeconfig gives a component the credentials an install gives it:
// it applies rbac (the component's service account and roles, e.g.
// deploy/scheduler-rbac.yaml) unless the service account namespace/name
// exists already, and returns AccountKubeconfig's kubeconfig for it.
func (c *Cluster) RoleKubeconfig(ctx context.Context, rbac []byte, namespace, name string, ttl time.Duration) (string, error) {
	client, err := c.Client()
	if err != nil {
		return "", err
	}
	switch _, err := client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{}); {
	case apierrors.IsNotFound(err):
		if err := Apply(ctx, client, rbac); err != nil {
			return "", fmt.Errorf("the roles of service account %s/%s: %w", namespace, name, err)
		}
	case err != nil:
		return "", err
	}
	return c.AccountKubeconfig(ctx, namespace, name, nil, ttl)
}
