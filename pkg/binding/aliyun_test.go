package binding

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
)

// aliyunMemory is the resource as Aliyun's pod specs write it.
const aliyunMemory corev1.ResourceName = "aliyun.com/gpu-mem"

// container asks name for amount (limits; requests as the API server sets
// them).
func container(name string, res corev1.ResourceName, amount int64) corev1.Container {
	l := corev1.ResourceList{res: *k8sresource.NewQuantity(amount, k8sresource.DecimalSI)}
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}}
}

// placed puts each named container on gpu.
func placed(gpus map[string]int) *alloc.Placement {
	p := &alloc.Placement{Node: "n1"}
	for _, name := range []string{"warm", "main", "side"} {
		if g, ok := gpus[name]; ok {
			p.Containers = append(p.Containers, alloc.ContainerPlacement{Name: name,
				GPUs: []alloc.Assignment{{GPU: g, UUID: "GPU-" + strconv.Itoa(g), Usage: alloc.Usage{MemoryMiB: 1024}}}})
		}
	}
	return p
}

func TestAliyunAnnotations(t *testing.T) {
	now := time.Unix(1_700_000_000, 123)
	const nanos = "1700000000000000123"
	for name, tc := range map[string]struct {
		pod  corev1.PodSpec
		p    *alloc.Placement
		want map[string]string
	}{
		"one container": {
			pod: corev1.PodSpec{Containers: []corev1.Container{container("main", aliyunMemory, 3)}},
			p:   placed(map[string]int{"main": 1}),
			want: map[string]string{"ALIYUN_COM_GPU_MEM_IDX": "1", "ALIYUN_COM_GPU_MEM_POD": "3",
				"ALIYUN_COM_GPU_MEM_ASSIGNED": "false", "ALIYUN_COM_GPU_MEM_ASSUME_TIME": nanos},
		},
		// POD is as asked, whatever the unit: 3500 (MiB) + 500 = 4000. The
		// init container's 7 is not the pod's: it runs before them.
		"app containers add up, init containers do not": {
			pod: corev1.PodSpec{
				InitContainers: []corev1.Container{container("warm", aliyunMemory, 7)},
				Containers:     []corev1.Container{container("main", aliyunMemory, 3500), container("side", aliyunMemory, 500)},
			},
			p: placed(map[string]int{"warm": 0, "main": 0, "side": 0}),
			want: map[string]string{"ALIYUN_COM_GPU_MEM_IDX": "0", "ALIYUN_COM_GPU_MEM_POD": "4000",
				"ALIYUN_COM_GPU_MEM_ASSIGNED": "false", "ALIYUN_COM_GPU_MEM_ASSUME_TIME": nanos},
		},
		// Containers on GPUs 2 and 0: both, in order. A container asking
		// another name (side on GPU 1) is not Aliyun's.
		"several GPUs": {
			pod: corev1.PodSpec{
				InitContainers: []corev1.Container{container("warm", aliyunMemory, 1)},
				Containers:     []corev1.Container{container("main", aliyunMemory, 2), container("side", "gpushare.io/gpu-mem", 1024)},
			},
			p: placed(map[string]int{"warm": 2, "main": 0, "side": 1}),
			want: map[string]string{"ALIYUN_COM_GPU_MEM_IDX": "0,2", "ALIYUN_COM_GPU_MEM_POD": "2",
				"ALIYUN_COM_GPU_MEM_ASSIGNED": "false", "ALIYUN_COM_GPU_MEM_ASSUME_TIME": nanos},
		},
		"another resource": {
			pod: corev1.PodSpec{Containers: []corev1.Container{container("main", "gpushare.io/gpu-mem", 3072)}},
			p:   placed(map[string]int{"main": 0}),
		},
		// Asked, but not placed: a model that does not manage the name.
		"not placed": {
			pod: corev1.PodSpec{Containers: []corev1.Container{container("main", aliyunMemory, 3)}},
			p:   placed(nil),
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := aliyunAnnotations(&corev1.Pod{Spec: tc.pod}, tc.p, now)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("aliyunAnnotations (-want,+got):\n%s", diff)
			}
		})
	}
}

// The Binding carries Aliyun's annotations beside the record, and only
// for a pod that asks aliyun.com/gpu-mem.
func TestBindAliyunAnnotations(t *testing.T) {
	for name, tc := range map[string]struct {
		res    corev1.ResourceName
		aliyun bool
	}{
		"aliyun.com/gpu-mem":  {res: aliyunMemory, aliyun: true},
		"gpushare.io/gpu-mem": {res: "gpushare.io/gpu-mem"},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			var got *corev1.Binding
			client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "binding" {
					return false, nil, nil
				}
				got = a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
				return true, got, nil
			})
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-p"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{container("main", tc.res, 3)}}}
			before := time.Now()
			asked := &gpusharev1.Asked{Annotations: map[string]string{"gpushare.io/gpu-models": "Tesla T4"}}
			if err := Bind(t.Context(), client, pod, "n1", placed(map[string]int{"main": 1}), asked); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			if got == nil {
				t.Fatal("no Binding was created")
			}
			rec, err := gpusharev1.ParseAllocation(got.Annotations[gpusharev1.AllocationAnnotation])
			switch {
			case err != nil:
				t.Errorf("the Binding has no valid record: %v", err)
			case rec.Asked == nil || rec.Asked.Annotations["gpushare.io/gpu-models"] != "Tesla T4":
				t.Errorf("the record keeps %+v of what the pod asked, want the models annotation", rec.Asked)
			}
			idx, ok := got.Annotations["ALIYUN_COM_GPU_MEM_IDX"]
			if ok != tc.aliyun || len(got.Annotations) != map[bool]int{true: 5, false: 1}[tc.aliyun] {
				t.Fatalf("annotations %v: want Aliyun's %v", got.Annotations, tc.aliyun)
			}
			if !tc.aliyun {
				return
			}
			if idx != "1" || got.Annotations["ALIYUN_COM_GPU_MEM_POD"] != "3" || got.Annotations["ALIYUN_COM_GPU_MEM_ASSIGNED"] != "false" {
				t.Errorf("annotations %v: want GPU 1, 3 asked, not assigned", got.Annotations)
			}
			ns, err := strconv.ParseInt(got.Annotations["ALIYUN_COM_GPU_MEM_ASSUME_TIME"], 10, 64)
			if err != nil || ns < before.UnixNano() || ns > after.UnixNano() {
				t.Errorf("ALIYUN_COM_GPU_MEM_ASSUME_TIME=%q (%v) is not the time of binding", got.Annotations["ALIYUN_COM_GPU_MEM_ASSUME_TIME"], err)
			}
		})
	}
}
