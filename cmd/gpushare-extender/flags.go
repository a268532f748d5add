package main

import (
	"flag"

	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/refused"
)

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; if empty, the KUBECONFIG environment variable, then the in-cluster configuration")
	fs.StringVar(&o.serving.Address, "bind-address", "127.0.0.1", "address to serve on. Loopback by default, for a kube-scheduler in the same network namespace; "+
		"a deployment that kube-scheduler reaches over the network sets the pod IP")
	fs.IntVar(&o.port, "port", 8888, "port to serve the extender verbs, /healthz and /metrics on")
	fs.IntVar(&o.healthzPort, "healthz-port", 0, "if not 0, also serve /healthz alone on this port of --bind-address, over plain HTTP without client certificates (for kubelet probes)")
	fs.StringVar(&o.serving.CertFile, "tls-cert-file", "", "serving certificate (PEM); with --tls-private-key-file the extender serves HTTPS "+
		"(kube-scheduler: an https urlPrefix, enableHTTPS: true and tlsConfig.caFile)")
	fs.StringVar(&o.serving.KeyFile, "tls-private-key-file", "", "private key (PEM) of --tls-cert-file")
	fs.StringVar(&o.serving.ClientCAFile, "client-ca-file", "", "CA bundle (PEM): every client must present a certificate signed by it, checked in the TLS handshake "+
		"(kube-scheduler: tlsConfig.certFile and tlsConfig.keyFile). This is the only client authentication: kube-scheduler's extender client can present a certificate but cannot send a bearer token")
	fs.StringVar(&o.allowedNames, "client-allowed-names", "", "comma-separated client certificate common names accepted; every certificate --client-ca-file signed if empty")
	fs.BoolVar(&o.serving.Insecure, "insecure-serve-unauthenticated", false, "serve without --client-ca-file (plain HTTP, or TLS alone): "+
		"anyone who reaches --bind-address, on loopback every process of the host's network namespace, can bind pods. For tests only")
	fs.StringVar(&o.schedulerNames, "scheduler-names", "default-scheduler,gpu-scheduler", "comma-separated schedulerNames whose pods bind binds (the profiles of the KubeSchedulerConfiguration that calls this extender); pods of other schedulers are refused")
	fs.StringVar(&o.prefix, "url-prefix", "/gpushare-scheduler", "URL prefix of the filter, prioritize and bind verbs (the urlPrefix path in KubeSchedulerConfiguration)")
	fs.StringVar(&o.config, "config", "", "GPUShareArgs file (apiVersion config.gpushare.io/v1alpha1); defaults if empty")
	fs.Int64Var(&o.maxBodyBytes, "max-request-bytes", extender.DefaultMaxBodyBytes, "largest filter or prioritize body accepted; larger ones get 413 (bind bodies: 64 KiB). "+
		"nodeCacheCapable: false sends whole Node objects: raise it for large clusters")
	fs.IntVar(&o.maxInflight, "max-requests-inflight", extender.DefaultMaxInflight, "most filter and prioritize calls served at once; more get 429 with Retry-After before their body is read. "+
		"Memory for bodies is at most about this times --max-request-bytes")
	fs.IntVar(&o.maxBinds, "max-binds-inflight", extender.DefaultMaxBindsInflight, "most bind calls served at once; up to 8 times as many more wait for a slot, and more still get 429 with Retry-After")
	fs.Float64Var(&o.qps, "kube-api-qps", 200, "queries per second to the apiserver")
	fs.IntVar(&o.burst, "kube-api-burst", 400, "burst of queries to the apiserver")
	fs.IntVar(&o.maxNodes, "max-filtered-nodes", 100, "most nodes filter passes on to scoring, the best by the node policy; 0 passes every node that fits")
	fs.BoolVar(&o.bestOnly, "best-node-only", true, "pass pods without soft scheduling preferences (preferred node or pod affinity, ScheduleAnyway topology spread) on the best node alone, "+
		"so kube-scheduler skips scoring them; false gives them --max-filtered-nodes like the others")
	fs.DurationVar(&o.releaseGrace, "claim-release-grace", refused.DefaultGrace, "how long a pod may wait unstarted, bound with a ResourceClaim or a record that over-commits its GPU, "+
		"before the extender deletes it once the kubelet says it refused the claim (FailedPrepareDynamicResources) or, for a record that came after a claim, its container (Failed), "+
		"so that its GPUs are freed and the pod's controller creates it again")
	fs.BoolVar(&o.profiling, "profiling", false, "serve Go profiles at /debug/pprof/ on the serving address")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
}
