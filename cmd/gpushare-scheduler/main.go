// Command gpushare-scheduler is kube-scheduler with gpushare's GPUShare
// plugin compiled in. It takes kube-scheduler's flags and a
// KubeSchedulerConfiguration (--config); see deploy/scheduler-config.yaml.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	// Every profile's GPUShare shares one cache, whose metrics join
	// kube-scheduler's own on its /metrics.
	shared := plugin.NewShared(legacyregistry.RawMustRegister)
	// The defragmentation plans are followed by a loop of their own,
	// for as long as the scheduler runs.
	go shared.Movers.Run(context.Background(), time.Second)
	// So are the claims that nodes refuse to prepare, by the leader
	// alone.
	shared.Releaser.Leading = func() bool { return leading(legacyregistry.DefaultGatherer) }
	go shared.Releaser.Run(context.Background(), time.Second)
	cmd := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, plugin.New(shared)))
	os.Exit(cli.Run(cmd))
}

// defaultGCPercent is the garbage collector's target when GOGC is not
// set (an operator's GOGC, even empty or off, is the runtime's to read): a collection starts once the heap has grown 80% over what the
// last one left live, against the Go runtime's 100. gpushare-scheduler
// holds the GPU cache and the records beside everything kube-scheduler
// holds, about a fifth more live heap at 5000 nodes; at 100 its RSS is
// 1.23-1.26x stock kube-scheduler's, at 80 1.08-1.14x, for a little more
// of the scheduler's CPU per pod; at 75 1.05-1.10x, but pods/s fell to
// 0.93 of stock's (docs/benchmarks.md, "Scheduler throughput").
// Prometheus's server lowers its target too, to 75.
const defaultGCPercent = 80

// leaderMetric is the gauge client-go's leader elector keeps, once made:
// 0 while it waits for the lease, 1 while it holds it.
const leaderMetric = "leader_election_master_status"

// leading reports whether this replica leads, from g's leaderMetric:
// without leader election (--leader-elect=false) there is no such gauge,
// and the one replica leads.
func leading(g prometheus.Gatherer) bool {
	families, err := g.Gather()
	if err != nil && len(families) == 0 {
		return false
	}
	for _, f := range families {
		if f.GetName() != leaderMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetGauge().GetValue() == 1 {
				return true
			}
		}
		return false
	}
	return true
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
