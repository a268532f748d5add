package plugin

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
)

// Annotate records placement p on the pod as its allocation annotation. The
// patch carries the pod's UID, so it cannot land on a new pod of the same
// name.
func Annotate(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, p *alloc.Placement) error {
	value, err := gpusharev1.Marshal(gpucache.Record(p))
	if err != nil {
		return err
	}
	patch := map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{gpusharev1.AllocationAnnotation: value},
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
