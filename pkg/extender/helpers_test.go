package extender

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/apis/config/v1alpha1"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/decision"
	"github.com/gpushare/gpushare/pkg/resource"
)

// testServer is a Server over a fake clientset and a cache holding
// nodes n1 and n2 (one 16 GiB GPU each), and the bindings it made.
type testServer struct {
	*Server
	handler http.Handler
	client  *fake.Clientset
	mu      sync.Mutex
	bound   map[string]string // pod name to node
}

func newTestServer(t testing.TB, pods ...*corev1.Pod) *testServer {
	t.Helper()
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	args, err := v1alpha1.LoadArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	model, err := resource.New(args.ResourceModel)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := decision.Policy(args, model)
	if err != nil {
		t.Fatal(err)
	}
	cache := gpucache.New(klog.Background(), gpucache.Options{Requests: model.PodRequest, Resources: resource.PodCPUMemory})
	policy.Follow(cache)
	for _, name := range []string{"n1", "n2"} {
		n, err := controlplane.NodeSpec{Name: name, Model: "NVIDIA GPU", MemoryMiB: 16384, Count: 1}.Node()
		if err != nil {
			t.Fatal(err)
		}
		cache.SetNode(n)
	}
	ts := &testServer{client: fake.NewClientset(objs...), bound: map[string]string{}}
	ts.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.bound[b.Name] = b.Target.Name
		return true, b, nil
	})
	ts.Server = &Server{Model: model, Policy: policy, Cache: cache, Client: ts.client, Logger: klog.Background(),
		Seed: args.Seed, Prefix: "/gpushare-scheduler", SchedulerNames: []string{"default-scheduler", "gpu-scheduler"}, BestOnly: true,
		MaxBodyBytes: 1 << 20}
	ts.handler = ts.Handler()
	return ts
}

// post sends body to the verb and returns the recorded answer.
func (ts *testServer) post(verb string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/gpushare-scheduler/"+verb, bytes.NewReader(body))
	w := httptest.NewRecorder()
	ts.handler.ServeHTTP(w, r)
	return w
}

func (ts *testServer) boundTo(pod string) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.bound[pod]
}

// filter calls filter for pod on nodes and returns the nodes it passed.
func (ts *testServer) filter(t testing.TB, pod *corev1.Pod, nodes ...string) []string {
	t.Helper()
	body, err := json.Marshal(map[string]any{"pod": pod, "nodenames": nodes})
	if err != nil {
		t.Fatal(err)
	}
	w := ts.post("filter", body)
	var res struct{ NodeNames []string }
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &res) != nil {
		t.Fatalf("filter: %d %s", w.Code, w.Body)
	}
	return res.NodeNames
}

// bind calls bind and returns the answer's Error.
func (ts *testServer) bind(t testing.TB, pod *corev1.Pod, node string) string {
	t.Helper()
	body, err := json.Marshal(map[string]any{"podName": pod.Name, "podNamespace": pod.Namespace, "podUID": pod.UID, "node": node})
	if err != nil {
		t.Fatal(err)
	}
	w := ts.post("bind", body)
	var res struct{ Error string }
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &res) != nil {
		t.Fatalf("bind: %d %s", w.Code, w.Body)
	}
	return res.Error
}

// pod returns a pod of default-scheduler asking mib of GPU memory (none
// if 0).
func pod(name string, mib int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{SchedulerName: "default-scheduler", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if mib > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpushare.io/gpu-mem": *k8sresource.NewQuantity(mib, k8sresource.DecimalSI)}
	}
	return p
}
