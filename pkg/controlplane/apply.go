package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// Apply creates the objects of a multi-document YAML manifest: namespaces,
// pods, PodGroups, deployments, statefulsets, jobs, service accounts,
// cluster roles and their bindings, and validating and mutating admission
// policies and their bindings. A namespaced object without a namespace
// goes to "default".
func Apply(ctx context.Context, client kubernetes.Interface, manifest []byte) error {
	r := utilyaml.NewYAMLReader(bufioReader(manifest))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if blank(doc) {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return fmt.Errorf("decoding manifest: %w", err)
		}
		if err := create(ctx, client, obj); err != nil {
			return err
		}
	}
}

// blank says whether a YAML document holds nothing but comments and
// white space (kubectl skips such documents too).
func blank(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		if l := bytes.TrimSpace(line); len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}

func ns(m *metav1.ObjectMeta) string {
	if m.Namespace == "" {
		return metav1.NamespaceDefault
	}
	return m.Namespace
}

func create(ctx context.Context, client kubernetes.Interface, obj any) error {
	var err error
	o := metav1.CreateOptions{}
	switch t := obj.(type) {
	case *corev1.Namespace:
		_, err = client.CoreV1().Namespaces().Create(ctx, t, o)
	case *corev1.Pod:
		_, err = client.CoreV1().Pods(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *schedulingv1beta1.PodGroup:
		_, err = client.SchedulingV1beta1().PodGroups(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *corev1.ResourceQuota:
		_, err = client.CoreV1().ResourceQuotas(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *appsv1.Deployment:
		_, err = client.AppsV1().Deployments(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *appsv1.StatefulSet:
		_, err = client.AppsV1().StatefulSets(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *batchv1.Job:
		_, err = client.BatchV1().Jobs(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *corev1.ServiceAccount:
		_, err = client.CoreV1().ServiceAccounts(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *rbacv1.Role:
		_, err = client.RbacV1().Roles(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *rbacv1.RoleBinding:
		_, err = client.RbacV1().RoleBindings(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *rbacv1.ClusterRole:
		_, err = client.RbacV1().ClusterRoles().Create(ctx, t, o)
	case *rbacv1.ClusterRoleBinding:
		_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, t, o)
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, t, o)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, t, o)
	case *admissionregistrationv1.MutatingAdmissionPolicy:
		_, err = client.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, t, o)
	case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
		_, err = client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, t, o)
	case *resourcev1.ResourceClaimTemplate:
		_, err = client.ResourceV1().ResourceClaimTemplates(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *resourcev1.ResourceClaim:
		_, err = client.ResourceV1().ResourceClaims(ns(&t.ObjectMeta)).Create(ctx, t, o)
	case *resourcev1.DeviceClass:
		_, err = client.ResourceV1().DeviceClasses().Create(ctx, t, o)
	default:
		return fmt.Errorf("apply: unsupported object %T", obj)
	}
	return err
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// ApplyHookPolicy applies manifest (deploy/gpu-hook-policy.yaml) and waits
// up to a minute until the API server enforces both of its policies: a
// pod that asks for GPU memory, created in a dry run, comes back holding
// its hook, and one whose container asks for no GPU but holds a hook is
// refused. The API server takes up each admission policy on its own, so
// until then the validating policy may refuse GPU pods that the mutating
// one has not given their hooks yet, or let through what it would
// refuse.
func ApplyHookPolicy(ctx context.Context, client kubernetes.Interface, manifest []byte) error {
	if err := Apply(ctx, client, manifest); err != nil {
		return err
	}
	return WaitHookPolicy(ctx, client)
}

// WaitHookPolicy waits up to a minute until the API server enforces the
// GPU hook policies, as ApplyHookPolicy does after applying them.
func WaitHookPolicy(ctx context.Context, client kubernetes.Interface) error {
	gpu := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpushare-hook-probe", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"gpushare.io/gpu-mem": k8sresource.MustParse("1024")}}}}},
	}
	bad := gpu.DeepCopy()
	bad.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpusharev1.HookResource: k8sresource.MustParse("1")}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(gpu.Namespace).Create(ctx, gpu, dryRun)
		if last = err; err != nil {
			return false, nil //nolint:nilerr // not yet: the validating policy came first
		}
		if _, hooked := p.Spec.Containers[0].Resources.Limits[gpusharev1.HookResource]; !hooked {
			last = errors.New("a GPU pod got no hook")
			return false, nil
		}
		if _, err := client.CoreV1().Pods(bad.Namespace).Create(ctx, bad, dryRun); err == nil {
			last = errors.New("a pod with a hook and no GPU was let through")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w (the last answer: %w)", err, last)
		}
		return fmt.Errorf("the GPU hook policy is not in force after a minute: %w", err)
	}
	return nil
}

// ApplyAllocationPolicy applies manifest (deploy/allocation-policy.yaml)
// and waits up to a minute until the API server enforces it: a pod that
// carries an allocation record, created by client (who must not be one
// of the policy's writers) in a dry run, is refused.
func ApplyAllocationPolicy(ctx context.Context, client kubernetes.Interface, manifest []byte) error {
	if err := Apply(ctx, client, manifest); err != nil {
		return err
	}
	forged := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpushare-allocation-probe", Namespace: metav1.NamespaceDefault,
			Annotations: map[string]string{gpusharev1.AllocationAnnotation: "{}"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(forged.Namespace).Create(ctx, forged, dryRun)
		return err != nil, nil
	})
	if err != nil {
		return fmt.Errorf("the allocation policy is not in force after a minute: %w", err)
	}
	return nil
}
