package resource

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// models returns the GPU models the pod allows, from the models annotation:
// names separated by "|" or ",", spaces around a name ignored ("Tesla
// V100-SXM2-16GB" keeps its inner space). No annotation allows any model.
func (m *Model) models(pod *corev1.Pod, key string) ([]string, error) {
	v, ok := pod.Annotations[m.modelsAnnotation]
	if !ok {
		return nil, nil
	}
	fail := func(format string, args ...any) error {
		return &RequestError{Pod: key, Resource: m.modelsAnnotation, Reason: fmt.Sprintf(format, args...)}
	}
	if strings.TrimSpace(v) == "" {
		return nil, fail("empty list of GPU models; name at least one, or remove the annotation to allow any model")
	}
	parts := strings.Split(strings.ReplaceAll(v, "|", ","), ",")
	models := make([]string, 0, len(parts))
	for _, part := range parts {
		name := strings.TrimSpace(part)
		if name == "" {
			return nil, fail("empty GPU model name in %q; separate names with a single | or ,", v)
		}
		models = append(models, name)
	}
	return models, nil
}

// mpsShare is what each GPU of an MPS container books.
type mpsShare struct {
	compute   int64
	memoryMiB int64
}

// mpsShare reads the pod's MPS annotations: the compute percent (default
// the model's mpsDefaultCompute) and the per-GPU memory limit.
func (t *translator) mpsShare(container string) (mpsShare, error) {
	if t.mps != nil {
		return *t.mps, nil
	}
	m := t.m
	s := mpsShare{compute: m.mpsDefaultCompute}
	fail := func(key, format string, args ...any) error {
		return &RequestError{Pod: t.key, Container: container, Resource: key, Reason: fmt.Sprintf(format, args...)}
	}
	if v, ok := t.pod.Annotations[m.mpsComputeAnnotation]; ok {
		c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || c < 1 || c > alloc.FullCompute {
			return s, fail(m.mpsComputeAnnotation, "%q is not a percent of one GPU; write a whole number from 1 to 100", v)
		}
		s.compute = c
	}
	if v, ok := t.pod.Annotations[m.mpsMemoryAnnotation]; ok {
		v = strings.TrimSpace(v)
		q, err := k8sresource.ParseQuantity(v)
		switch {
		case err != nil:
			return s, fail(m.mpsMemoryAnnotation, "%q is not a quantity; write GPU memory per GPU such as 4Gi or 3500Mi", v)
		case v[len(v)-1] >= '0' && v[len(v)-1] <= '9':
			return s, fail(m.mpsMemoryAnnotation, "%q has no unit and would count bytes; write 4Gi or 3500Mi", v)
		case q.Sign() <= 0:
			return s, fail(m.mpsMemoryAnnotation, "%q is not positive", v)
		}
		const mib = 1 << 20
		s.memoryMiB = (q.Value() + mib - 1) / mib
	}
	t.mps = &s
	return s, nil
}
