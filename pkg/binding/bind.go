package binding

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/record"
)

// Bind binds the pod to node and, when p is not nil, records p on the pod
// as its allocation annotation in the same request: the apiserver copies a
// Binding's annotations onto the pod as it sets the node, so a bound pod
// always carries its record and a failed bind leaves none. The Binding
// carries the pod's UID, so it cannot land on a new pod of the same name.
// A pod that asks aliyun.com/gpu-mem also gets Aliyun's annotations
// (aliyunAnnotations), for tools written for Aliyun's gpushare. asked is
// the pod's request-shaping annotations the placement was made for
// (resource.Model.RequestAnnotations): the record keeps them, so that its
// readers judge it by the request it was made for, whatever later edits
// of the pod say.
func Bind(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, node string, p *alloc.Placement, asked *gpusharev1.Asked) error {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if p != nil {
		value, err := recordValue(p, asked)
		if err != nil {
			return err
		}
		binding.Annotations = map[string]string{gpusharev1.AllocationAnnotation: value}
		maps.Copy(binding.Annotations, aliyunAnnotations(pod, p, time.Now()))
	}
	if err := client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding pod %s/%s to %s: %w", pod.Namespace, pod.Name, node, err)
	}
	return nil
}

// Annotate records placement p, made for asked, on the pod as its
// allocation annotation (and Aliyun's, as Bind does). The
// patch carries the pod's UID, so it cannot land on a new pod of the same
// name.
func Annotate(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, p *alloc.Placement, asked *gpusharev1.Asked) error {
	value, err := recordValue(p, asked)
	if err != nil {
		return err
	}
	annotations := map[string]string{gpusharev1.AllocationAnnotation: value}
	maps.Copy(annotations, aliyunAnnotations(pod, p, time.Now()))
	patch := map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": annotations,
	}}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("recording the GPU allocation on pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// recordValue is the allocation annotation's value for p made for asked.
func recordValue(p *alloc.Placement, asked *gpusharev1.Asked) (string, error) {
	a := record.Record(p)
	a.Asked = asked
	return gpusharev1.Marshal(a)
}
