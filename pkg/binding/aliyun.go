package binding

import (
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/record"
)

// The annotations Aliyun's gpushare scheduler extender writes on the pods
// it binds, which its tools (kubectl inspect gpushare) read.
const (
	aliyunAssigned   = "ALIYUN_COM_GPU_MEM_ASSIGNED"
	aliyunAssumeTime = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
)

// aliyunAnnotations returns the annotations Aliyun's scheduler extender
// writes at bind time for a pod that asks aliyun.com/gpu-mem and is placed
// as p at now; nil for any other pod. gpushare's record stays the truth;
// these say the same in Aliyun's terms:
//
//	ALIYUN_COM_GPU_MEM_IDX          the GPU index of the containers that ask it
//	                                (several GPUs: their indexes, ascending, comma-separated)
//	ALIYUN_COM_GPU_MEM_POD          the app containers' aliyun.com/gpu-mem, as asked
//	ALIYUN_COM_GPU_MEM_ASSIGNED     "false": scheduled, not yet started on the node
//	ALIYUN_COM_GPU_MEM_ASSUME_TIME  now, in nanoseconds since the epoch
func aliyunAnnotations(pod *corev1.Pod, p *alloc.Placement, now time.Time) map[string]string {
	asks := map[string]bool{}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if _, ok := record.AliyunAmount(&cs[i]); ok {
				asks[cs[i].Name] = true
			}
		}
	}
	var idx []int
	for _, c := range p.Containers {
		if !asks[c.Name] {
			continue
		}
		for _, g := range c.GPUs {
			if !slices.Contains(idx, g.GPU) {
				idx = append(idx, g.GPU)
			}
		}
	}
	if len(idx) == 0 {
		return nil
	}
	slices.Sort(idx)
	s := make([]string, len(idx))
	for i, g := range idx {
		s[i] = strconv.Itoa(g)
	}
	return map[string]string{
		record.AliyunIndex: strings.Join(s, ","),
		record.AliyunPod:   strconv.FormatInt(record.AliyunPodAmount(pod), 10),
		aliyunAssigned:     "false",
		aliyunAssumeTime:   strconv.FormatInt(now.UnixNano(), 10),
	}
}
