package holder

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/resource"
)

// aliyunEnv returns what Aliyun's gpushare device plugin tells a container
// that asks aliyun.com/gpu-mem, so that workloads written for it (e.g.
// TensorFlow sized by CONTAINER/DEV) run unchanged; nil for any other
// container. Amounts are in the pod's unit of the resource, unitMiB MiB
// (1024 for GiB), rounded down as Aliyun's plugin does:
//
//	ALIYUN_COM_GPU_MEM_IDX        the container's GPU index (several: comma-separated)
//	ALIYUN_COM_GPU_MEM_CONTAINER  the container's memory in the record, Σ MiB / unitMiB
//	ALIYUN_COM_GPU_MEM_DEV        the memory of its GPU (several: the smallest), MiB / unitMiB
//	ALIYUN_COM_GPU_MEM_POD        the pod's app containers' aliyun.com/gpu-mem, as asked
//
// gpuMiB gives the memory of each of c's GPUs, in c.GPUs order.
func aliyunEnv(pod *corev1.Pod, container string, c *gpusharev1.ContainerAllocation, unitMiB int64, gpuMiB []int64) []string {
	if unitMiB <= 0 || len(c.GPUs) == 0 || len(gpuMiB) != len(c.GPUs) || !asksAliyun(pod, container) {
		return nil
	}
	idx := make([]string, len(c.GPUs))
	var mib int64
	dev := gpuMiB[0]
	for i, g := range c.GPUs {
		idx[i] = strconv.Itoa(g.Index)
		mib += g.MemoryMiB
		dev = min(dev, gpuMiB[i])
	}
	return []string{
		record.AliyunIndex + "=" + strings.Join(idx, ","),
		"ALIYUN_COM_GPU_MEM_CONTAINER=" + strconv.FormatInt(mib/unitMiB, 10),
		"ALIYUN_COM_GPU_MEM_DEV=" + strconv.FormatInt(dev/unitMiB, 10),
		record.AliyunPod + "=" + strconv.FormatInt(record.AliyunPodAmount(pod), 10),
	}
}

// asksAliyun reports whether the named container of pod, init or app,
// asks aliyun.com/gpu-mem.
func asksAliyun(pod *corev1.Pod, container string) bool {
	c := resource.Container(pod, container)
	return c != nil && resource.ContainerAsks(c, record.AliyunMemory)
}

// aliyunEnvOf is aliyunEnv for container of pod on this node's GPUs, in
// the pod's unit (Config.UnitMiB).
func (c *Resolver) aliyunEnvOf(pod *corev1.Pod, container string, a *gpusharev1.ContainerAllocation) []string {
	if c.cfg.UnitMiB == nil {
		return nil
	}
	gpuMiB := make([]int64, 0, len(a.GPUs))
	c.mu.Lock()
	for _, g := range a.GPUs {
		if d, ok := c.gpus[g.UUID]; ok {
			gpuMiB = append(gpuMiB, d.MemoryMiB)
		}
	}
	c.mu.Unlock()
	return aliyunEnv(pod, container, a, c.cfg.UnitMiB(record.AliyunMemory, pod.Namespace), gpuMiB)
}
