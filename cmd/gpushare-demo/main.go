// Command gpushare-demo starts a local GPU cluster: a real control plane
// with kwok's simulated GPU nodes, as root a real node (a kubelet and
// containerd that start its pods' containers), and gpushare-scheduler.
// It applies the example workloads of the Aliyun system, the KETI system
// and the Elastic GPU Scheduler (examples/) and prints where every
// container landed. The cluster keeps running; `gpushare-demo down` (make
// demo-down) stops it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/gpushare/gpushare/pkg/controlplane"
	"github.com/gpushare/gpushare/pkg/version"
)

func main() {
	fs := flag.NewFlagSet("gpushare-demo", flag.ExitOnError)
	dir := fs.String("dir", defaultDir(), "directory for the cluster's state, logs and kubeconfig")
	scheduler := fs.String("scheduler", "bin/gpushare-scheduler", "the gpushare-scheduler binary")
	nodeDaemon := fs.String("node-daemon", "bin/gpushare-node", "the gpushare-node binary, run with simulated GPUs for each node")
	config := fs.String("config", "deploy/scheduler-config.yaml", "the scheduler's KubeSchedulerConfiguration")
	examples := fs.String("examples", "examples", "directory of manifests to apply")
	schedulerRBAC := fs.String("scheduler-rbac", "deploy/scheduler-rbac.yaml", "what gpushare-scheduler may do: its service account and roles")
	nodeRBAC := fs.String("node-rbac", "deploy/node-rbac.yaml", "what each gpushare-node may do: its service account, role and admission policy")
	allocationPolicy := fs.String("allocation-policy", "deploy/allocation-policy.yaml", "the admission policy that lets only gpushare's scheduler write allocation records; empty to leave it out")
	showVersion := fs.Bool("version", false, "print the version and exit")
	realNodeMode := fs.String("real-node", "auto", "add "+realNode.Name+", a node with a real kubelet and containerd that start its pods' containers: auto (when root and its tools are built), on, or off")
	realNodePrivate := fs.Bool("real-node-private", false, "run the real node's kubelet and containerd in a mount namespace of their own, with their kubelet directory at "+controlplane.PrivateKubeletRoot+" and their own bridge, addresses and cgroup: beside another demo's real node (the tests run theirs so)")
	probeImage := fs.String("probe-image", "bin/images/gpushare-probe", "the OCI layout of the real node's workload image (test/gpushare-probe)")
	listen := fs.String("listen", "", "serve-image: the address to serve on")
	draDaemon := fs.String("dra-daemon", "bin/gpushare-dra", "the gpushare-dra binary, run on the real node as its DRA driver; empty to leave it out")
	draRBAC := fs.String("dra-rbac", "deploy/node-dra-rbac.yaml", "what gpushare-dra may do: its role and admission policy")
	draClass := fs.String("dra-class", "deploy/dra-deviceclass.yaml", "the DeviceClass of gpushare's DRA devices")
	webhook := fs.String("webhook", "bin/gpushare-webhook", "the gpushare-webhook binary, run for two teams' GPU quotas (--teams); empty to leave them out")
	webhookRBAC := fs.String("webhook-rbac", "deploy/webhook-rbac.yaml", "what gpushare-webhook may do: its service account and role")
	quotaWebhook := fs.String("quota-webhook", "deploy/quota-webhook.yaml", "the manifest whose MutatingWebhookConfiguration registers gpushare-webhook")
	teamsDir := fs.String("teams", "examples/teams", "directory of the teams' quotas.yaml and pods.yaml")
	hookPolicy := fs.String("hook-policy", "deploy/gpu-hook-policy.yaml", "the admission policies that give each GPU container its gpushare.io/gpu-hook; empty to leave them out")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: gpushare-demo [flags] [up|down]\n       gpushare-demo --listen=ADDR serve-image LAYOUT (the real node's image mirror)\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println(version.Line("gpushare-demo"))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd := fs.Arg(0); cmd {
	case "", "up":
		switch *realNodeMode {
		case "auto", "on", "off":
			err = up(ctx, options{dir: *dir, scheduler: *scheduler, nodeDaemon: *nodeDaemon, config: *config, examples: *examples,
				schedulerRBAC: *schedulerRBAC, nodeRBAC: *nodeRBAC, hookPolicy: *hookPolicy, allocationPolicy: *allocationPolicy,
				realNode: *realNodeMode, realNodePrivate: *realNodePrivate, probeImage: *probeImage, draDaemon: *draDaemon, draRBAC: *draRBAC, draClass: *draClass,
				webhook: *webhook, webhookRBAC: *webhookRBAC, quotaWebhook: *quotaWebhook, teams: *teamsDir})
		default:
			err = fmt.Errorf("--real-node=%q: want auto, on or off", *realNodeMode)
		}
	case "down":
		err = down(*dir)
	case "serve-image":
		err = serveImage(*listen, fs.Arg(1))
	default:
		err = fmt.Errorf("unknown command %q: want up, down or serve-image", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-demo:", err)
		os.Exit(1)
	}
}

func defaultDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "gpushare-demo")
	}
	return filepath.Join(home, ".cache", "gpushare", "demo")
}

var errRunning = errors.New("a demo cluster is already running; stop it with `make demo-down`")
