package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"
)

// DeployKubeconfig is the kubeconfig path in deploy/ configurations;
// StartScheduler replaces it with the cluster's.
const DeployKubeconfig = "/etc/kubernetes/scheduler.conf"

// Scheduler is a running kube-scheduler (stock or gpushare's).
type Scheduler struct {
	*Process
	// URL serves /healthz and /metrics.
	URL string
}

// StartScheduler runs a kube-scheduler binary with the given
// KubeSchedulerConfiguration as the cluster's scheduler user (see
// StartSchedulerAs).
func (c *Cluster) StartScheduler(ctx context.Context, name, bin string, config []byte, extraArgs ...string) (*Scheduler, error) {
	return c.StartSchedulerAs(ctx, name, bin, c.SchedulerKubeconfig, config, extraArgs...)
}

// StartSchedulerAs runs a kube-scheduler binary with the given
// KubeSchedulerConfiguration, in which DeployKubeconfig is replaced by
// kubeconfig (the scheduler's credentials: also those it checks its own
// callers with), and waits until it is healthy.
func (c *Cluster) StartSchedulerAs(ctx context.Context, name, bin, kubeconfig string, config []byte, extraArgs ...string) (*Scheduler, error) {
	config = bytes.ReplaceAll(config, []byte(DeployKubeconfig), []byte(kubeconfig))
	path := c.path(name + "-config.yaml")
	if err := os.WriteFile(path, config, 0o600); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--config=" + path,
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		"--v=2",
	}, extraArgs...)
	p, err := c.Run(name, bin, args...)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{Process: p, URL: "https://" + hostPort(port)}
	if err := WaitHTTP(ctxTimeout(ctx, time.Minute), p, s.URL+"/healthz", ""); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

// StockSchedulerConfig is stock kube-scheduler's configuration with its
// client's QPS and burst set to qps, for StartScheduler.
func StockSchedulerConfig(qps int) []byte {
	return fmt.Appendf(nil, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, DeployKubeconfig, qps, qps)
}
