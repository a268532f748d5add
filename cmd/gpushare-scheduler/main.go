// Command gpushare-scheduler is kube-scheduler with gpushare's GPUShare
// plugin compiled in. It takes kube-scheduler's flags and a
// KubeSchedulerConfiguration (--config); see deploy/scheduler-config.yaml.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gpushare/gpushare/pkg/plugin"
)

func main() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, plugin.New))
	os.Exit(cli.Run(cmd))
}
