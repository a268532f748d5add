package plugin

import (
	"reflect"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
)

// fitStateKey is where NodeResourcesFit's PreFilter leaves the pod's
// requests for its Filter.
const fitStateKey fwk.StateKey = "PreFilter" + names.NodeResourcesFit

// leaveToGPUShare takes the resources in asks out of the requests that
// NodeResourcesFit's Filter checks, and reports whether it could. GPUShare
// checks each of them on every node itself (kubeletShort, against what the
// node's kubelet advertises), and NodeResourcesFit leaves them to it
// anyway (ignoredResourceGroups): but before skipping a resource it
// ignores, its Filter validates the resource's name with a regular
// expression, on every node, for every pod. At 5000 nodes that was a
// tenth of gpushare-scheduler's CPU (docs/benchmarks.md, "Scheduler
// throughput").
//
// Call it from PreFilter: GPUShare's comes after NodeResourcesFit's in
// every profile that enables GPUShare through multiPoint. Where the state
// is not there or not of the shape expected (another kube-scheduler
// version), it changes nothing, and NodeResourcesFit checks as before.
func leaveToGPUShare(state fwk.CycleState, asks []ask) bool {
	if len(asks) == 0 {
		return false
	}
	data, err := state.Read(fitStateKey)
	if err != nil {
		return false
	}
	r := fitRequest(data)
	if r == nil {
		return false
	}
	for _, a := range asks {
		delete(r.ScalarResources, a.name)
	}
	return true
}

// fitRequest returns the requests in NodeResourcesFit's state, a struct
// that embeds framework.Resource; nil if data is not that.
func fitRequest(data fwk.StateData) *framework.Resource {
	v := reflect.ValueOf(data)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f, ok := v.Elem().Type().FieldByName("Resource")
	if !ok || !f.Anonymous || f.Type != reflect.TypeFor[framework.Resource]() {
		return nil
	}
	r, _ := v.Elem().FieldByIndex(f.Index).Addr().Interface().(*framework.Resource)
	return r
}
