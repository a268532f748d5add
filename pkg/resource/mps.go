package resource

import (
	"fmt"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// mpsRequest translates a container that asks GPUs under MPS (KETI's
// keti.com/mpsgpu): that many GPUs, shared, each booking the pod's MPS
// compute share and, if the pod sets the memory annotation, that much
// memory. An MPS GPU is never exclusive: MPS exists to share it.
func (t *translator) mpsRequest(c *corev1.Container, got asks) (*alloc.ContainerRequest, error) {
	mps := got[v1alpha1.KindMPS]
	if len(got) > 1 {
		var others []string
		for k, a := range got {
			if k != v1alpha1.KindMPS {
				others = append(others, string(a.name))
			}
		}
		slices.Sort(others)
		return nil, t.fail(c, mps.name, fmt.Sprintf(
			"cannot be combined with %s: an MPS container asks its GPU count with %s and its memory per GPU with the pod annotation %s",
			strings.Join(others, ", "), mps.name, t.m.mpsMemoryAnnotation))
	}
	share, err := t.mpsShare(c.Name)
	if err != nil {
		return nil, err
	}
	if share.memoryMiB > 0 && mps.value > math.MaxInt64/share.memoryMiB {
		return nil, t.fail(c, mps.name, fmt.Sprintf("%d GPUs of %d MiB each is too large", mps.value, share.memoryMiB))
	}
	cr := &alloc.ContainerRequest{
		Name:      c.Name,
		Count:     int(mps.value),
		Compute:   share.compute,
		MemoryMiB: share.memoryMiB * mps.value,
		MPS:       true,
	}
	if err := t.checkMemory(c, t.m.mpsMemoryAnnotation, "", cr); err != nil {
		return nil, err
	}
	return cr, nil
}
