// Package binding writes a placement to the cluster: it binds a pod to
// its node and records the pod's allocation (the annotation
// gpushare.io/allocation, and Aliyun's for pods that ask
// aliyun.com/gpu-mem) in the same Binding request, or patches the record
// on a pod that something else bound. The scheduler plugin and the
// extender both bind through it, so the two ways into kube-scheduler
// leave the same record.
package binding
