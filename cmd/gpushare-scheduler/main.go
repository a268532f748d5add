// Command gpushare-scheduler is kube-scheduler with gpushare's GPUShare
// plugin compiled in. It takes kube-scheduler's flags and a
// KubeSchedulerConfiguration (--config); see deploy/scheduler-config.yaml.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gpushare/gpushare/pkg/plugin"
	"github.com/gpushare/gpushare/pkg/version"
)

func main() {
	if versionRequested(os.Args[1:]) {
		fmt.Printf("%s on kube-scheduler %s\n", version.Line("gpushare-scheduler"), version.Dependency("k8s.io/kubernetes"))
		return
	}
	// Every profile's GPUShare shares one cache, whose metrics join
	// kube-scheduler's own on its /metrics.
	shared := plugin.NewShared(legacyregistry.RawMustRegister)
	// The defragmentation plans are followed by a loop of their own,
	// for as long as the scheduler runs.
	go shared.Movers.Run(context.Background(), time.Second)
	// So are the claims that nodes refuse to prepare.
	go shared.Releaser.Run(context.Background(), time.Second)
	cmd := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, plugin.New(shared)))
	os.Exit(cli.Run(cmd))
}

// versionRequested reports whether args hold --version. It is answered
// before kube-scheduler's command, whose own --version prints
// component-base's version, which gpushare's builds leave unset;
// --version=raw still reaches it.
func versionRequested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--version", "--version=true":
			return true
		}
	}
	return false
}
