// Package record is the codec between a pod's placement records and the
// core's placements: gpushare's own allocation record
// (gpusharev1.Allocation, with the request it was made for), the records
// the Aliyun system and the Elastic GPU Scheduler left on the pods they
// placed (translated through the pod's own request), and a Node's GPU
// inventory. The scheduler's cache and the node daemon both read records
// through it, so that they agree on what a record holds; it keeps no
// state.
package record
