package app

import (
	"context"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	configv1 "github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// pageSize is how many objects one list call asks for.
const pageSize = 500

type snapshot struct {
	nodes  []corev1.Node
	pods   []corev1.Pod
	leases []coordinationv1.Lease
	claims []resourceapi.ResourceClaim
}

// list reads the nodes matching selector and every pod, in pages, the two
// lists at once.
func list(ctx context.Context, client kubernetes.Interface, selector string) (*snapshot, error) {
	s := &snapshot{}
	podErr := make(chan error, 1)
	go func() {
		var err error
		s.pods, err = pages(ctx, metav1.ListOptions{}, func(ctx context.Context, o metav1.ListOptions) ([]corev1.Pod, string, error) {
			l, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
			if err != nil {
				return nil, "", err
			}
			return l.Items, l.Continue, nil
		})
		podErr <- err
	}()
	nodes, err := pages(ctx, metav1.ListOptions{LabelSelector: selector}, func(ctx context.Context, o metav1.ListOptions) ([]corev1.Node, string, error) {
		l, err := client.CoreV1().Nodes().List(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.Continue, nil
	})
	if perr := <-podErr; perr != nil {
		return nil, fmt.Errorf("listing pods: %w", perr)
	}
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	s.nodes = nodes
	// The node daemons' leases carry live GPU use. A user who may not
	// list them sees the use only of nodes whose daemons still write it
	// on the Node.
	leases, err := client.CoordinationV1().Leases(gpusharev1.LeaseNamespace).List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		s.leases = leases.Items
	case !apierrors.IsForbidden(err):
		return nil, fmt.Errorf("listing the node daemons' leases: %w", err)
	}
	// ResourceClaims hold gpushare's DRA devices. A cluster without the
	// DRA API, or a user who may not list claims, sees pods' records only.
	claims, err := pages(ctx, metav1.ListOptions{}, func(ctx context.Context, o metav1.ListOptions) ([]resourceapi.ResourceClaim, string, error) {
		l, err := client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.Continue, nil
	})
	switch {
	case err == nil:
		s.claims = claims
	case !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	return s, nil
}

// pages calls get until the list is complete.
func pages[T any](ctx context.Context, o metav1.ListOptions, get func(context.Context, metav1.ListOptions) ([]T, string, error)) ([]T, error) {
	o.Limit = pageSize
	var all []T
	for {
		items, next, err := get(ctx, o)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		o.Continue = next
	}
}

// getPod reads one pod and its events.
func getPod(ctx context.Context, client kubernetes.Interface, namespace, name string) (*corev1.Pod, []corev1.Event, error) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	sel := fields.Set{"involvedObject.name": name, "involvedObject.namespace": namespace}.AsSelector().String()
	events, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the pod's events: %w", err)
	}
	return pod, events.Items, nil
}

// argsKey is the key of the chart's args ConfigMap that holds the
// GPUShareArgs every component reads.
const argsKey = "args.yaml"

// clusterArgs reads the GPUShareArgs of the gpushare install from its
// ConfigMap (labelled app.kubernetes.io/part-of=gpushare, key args.yaml),
// in any namespace. With none found, or none the user may list, it
// returns nil args and why. Installs whose resource models differ are an
// error: the user picks one with --config.
func clusterArgs(ctx context.Context, client kubernetes.Interface) (*configv1.GPUShareArgs, string, error) {
	l, err := client.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=gpushare"})
	switch {
	case apierrors.IsForbidden(err):
		return nil, "you may not list ConfigMaps to find gpushare's args", nil
	case err != nil:
		return nil, "", fmt.Errorf("listing gpushare's ConfigMaps: %w", err)
	}
	var found *configv1.GPUShareArgs
	var from []string
	for i := range l.Items {
		cm := &l.Items[i]
		raw, ok := cm.Data[argsKey]
		if !ok {
			continue
		}
		args, err := configv1.LoadArgs([]byte(raw))
		if err != nil {
			return nil, "", fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
		if found != nil && !equality.Semantic.DeepEqual(found.ResourceModel, args.ResourceModel) {
			return nil, "", fmt.Errorf("the gpushare ConfigMaps %s and %s/%s hold different resource models: pick one with --config",
				strings.Join(from, ", "), cm.Namespace, cm.Name)
		}
		found = args
		from = append(from, cm.Namespace+"/"+cm.Name)
	}
	if found == nil {
		return nil, "no gpushare args ConfigMap (label app.kubernetes.io/part-of=gpushare, key " + argsKey + ") in the cluster", nil
	}
	return found, strings.Join(from, ", "), nil
}

// listDefrag reads what decides which pods may move: the namespaces
// (their opt-in label) and the PodDisruptionBudgets. A user who may not
// list namespaces sees only pods that opt in themselves; one who may not
// list budgets is refused: a plan must not break them.
func listDefrag(ctx context.Context, client kubernetes.Interface) ([]corev1.Namespace, []policyv1.PodDisruptionBudget, error) {
	var namespaces []corev1.Namespace
	l, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		namespaces = l.Items
	case !apierrors.IsForbidden(err):
		return nil, nil, fmt.Errorf("listing namespaces: %w", err)
	}
	pdbs, err := client.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing PodDisruptionBudgets, which a plan must keep: %w", err)
	}
	return namespaces, pdbs.Items, nil
}
