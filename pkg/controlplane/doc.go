// Package controlplane starts a real Kubernetes control plane on loopback
// for gpushare's integration tests, benchmarks and demo: etcd,
// kube-apiserver, kube-controller-manager and kwok (simulated nodes), from
// binaries that hack/cluster-tools.sh builds from the Go module proxy.
// Every server listens on 127.0.0.1 on a free port, keeps its state in one
// directory, and is stopped by Stop, by PID.
package controlplane
