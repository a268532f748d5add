package resource

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// podBuilder builds test pods: makePod("p").app("c", limits(...)).obj().
type podBuilder struct{ pod corev1.Pod }

func makePod(name string) *podBuilder {
	return &podBuilder{pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}}
}

func (b *podBuilder) app(name string, r corev1.ResourceRequirements) *podBuilder {
	b.pod.Spec.Containers = append(b.pod.Spec.Containers, corev1.Container{Name: name, Resources: r})
	return b
}

func (b *podBuilder) initContainer(name string, r corev1.ResourceRequirements) *podBuilder {
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, corev1.Container{Name: name, Resources: r})
	return b
}

func (b *podBuilder) sidecar(name string, r corev1.ResourceRequirements) *podBuilder {
	always := corev1.ContainerRestartPolicyAlways
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers,
		corev1.Container{Name: name, Resources: r, RestartPolicy: &always})
	return b
}

func (b *podBuilder) annotate(key, value string) *podBuilder {
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[key] = value
	return b
}

func (b *podBuilder) overhead(kv ...string) *podBuilder {
	b.pod.Spec.Overhead = list(kv...)
	return b
}

func (b *podBuilder) podRequests(kv ...string) *podBuilder {
	b.pod.Spec.Resources = &corev1.ResourceRequirements{Requests: list(kv...)}
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return &b.pod }

// list makes a ResourceList from name, quantity pairs.
func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = k8sresource.MustParse(kv[i+1])
	}
	return l
}

func limits(kv ...string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Limits: list(kv...)}
}

func reqs(kv ...string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: list(kv...)}
}

// fromTemplate makes a pod from the YAML of a workload's spec.template, as
// a controller would, decoding strictly.
func fromTemplate(t *testing.T, namespace, name, template string) *corev1.Pod {
	t.Helper()
	var tmpl corev1.PodTemplateSpec
	if err := yaml.UnmarshalStrict([]byte(template), &tmpl); err != nil {
		t.Fatalf("decoding pod template: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Namespace, pod.Name = namespace, name
	return pod
}
