package v1alpha1

// Defaults of the optional fields.
const (
	DefaultModelsAnnotation     = "gpushare.io/gpu-models"
	DefaultMPSComputeAnnotation = "gpushare.io/mps-compute"
	DefaultMPSMemoryAnnotation  = "GPUlimits"
	// DefaultMPSCompute books a tenth of each GPU per MPS container, so ten
	// MPS containers share a GPU: the capacity KETI's device plugin
	// advertises by default (--ketimpsgpu=10 keti.com/mpsgpu devices per
	// GPU).
	DefaultMPSCompute int64 = 10
)

// DefaultResources returns the built-in resource list:
//
//	name                       kind     unit
//	gpushare.io/gpu-mem        Memory   MiB
//	gpushare.io/gpu-core       Compute
//	gpushare.io/gpu-count      Count
//	aliyun.com/gpu-mem         Memory   GiB
//	aliyun.com/gpu-count       Count
//	elasticgpu.io/gpu-memory   Memory   MiB
//	elasticgpu.io/gpu-core     Compute
//	keti.com/mpsgpu            MPS
func DefaultResources() []Resource {
	return []Resource{
		{Name: "gpushare.io/gpu-mem", Kind: KindMemory, Unit: MiB},
		{Name: "gpushare.io/gpu-core", Kind: KindCompute},
		{Name: "gpushare.io/gpu-count", Kind: KindCount},
		{Name: "aliyun.com/gpu-mem", Kind: KindMemory, Unit: GiB},
		{Name: "aliyun.com/gpu-count", Kind: KindCount},
		{Name: "elasticgpu.io/gpu-memory", Kind: KindMemory, Unit: MiB},
		{Name: "elasticgpu.io/gpu-core", Kind: KindCompute},
		{Name: "keti.com/mpsgpu", Kind: KindMPS},
	}
}

// HAMiResources returns the resources of HAMi's NVIDIA devices, with the
// names and meanings HAMi's chart gives them:
//
//	name                           kind
//	nvidia.com/gpu                 Count
//	nvidia.com/gpumem              MemoryPerGPU   MiB
//	nvidia.com/gpumem-percentage   MemoryPercent
//	nvidia.com/gpucores            ComputePerGPU
//
// They are not built in: nvidia.com/gpu is NVIDIA's device plugin's too.
// A cluster moving from HAMi lists them with DefaultResources.
func HAMiResources() []Resource {
	return []Resource{
		{Name: "nvidia.com/gpu", Kind: KindCount},
		{Name: "nvidia.com/gpumem", Kind: KindMemoryPerGPU, Unit: MiB},
		{Name: "nvidia.com/gpumem-percentage", Kind: KindMemoryPercent},
		{Name: "nvidia.com/gpucores", Kind: KindComputePerGPU},
	}
}

// Default returns the built-in resource model, defaulted.
func Default() *ResourceModel {
	m := &ResourceModel{}
	SetDefaults(m)
	return m
}

// SetDefaults fills the unset fields of m. A nil Resources list gets the
// built-in list; an empty, non-nil one is left for Validate to reject.
func SetDefaults(m *ResourceModel) {
	if m.APIVersion == "" && m.Kind == "" {
		m.APIVersion, m.Kind = APIVersion, Kind
	}
	if m.Resources == nil {
		m.Resources = DefaultResources()
	}
	for i := range m.Resources {
		if m.Resources[i].Kind.Memory() && m.Resources[i].Unit == "" {
			m.Resources[i].Unit = MiB
		}
	}
	if m.ModelsAnnotation == "" {
		m.ModelsAnnotation = DefaultModelsAnnotation
	}
	if m.MPSDefaultCompute == nil {
		v := DefaultMPSCompute
		m.MPSDefaultCompute = &v
	}
	if m.MPSComputeAnnotation == "" {
		m.MPSComputeAnnotation = DefaultMPSComputeAnnotation
	}
	if m.MPSMemoryAnnotation == "" {
		m.MPSMemoryAnnotation = DefaultMPSMemoryAnnotation
	}
}
