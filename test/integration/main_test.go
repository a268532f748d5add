// Package integration runs gpushare against a real control plane: etcd,
// kube-apiserver, kube-controller-manager and kwok built by
// hack/cluster-tools.sh (`make cluster-tools`). Without the binaries the
// tests skip, unless GPUSHARE_REQUIRE_CLUSTER=1 (as in `make test` and CI),
// when they fail.
package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/controlplane"
)

var (
	tools controlplane.Tools
	// schedulerBin, extenderBin and webhookBin are gpushare's, built for
	// this run.
	schedulerBin, extenderBin, webhookBin string
	// binDir holds the binaries the tests build; TestMain removes it.
	binDir string
	// root is the repository root.
	root string
	// skip says why the tests cannot run.
	skip string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if root, err = filepath.Abs("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tools, err = controlplane.FindTools("")
	if err != nil {
		if os.Getenv("GPUSHARE_REQUIRE_CLUSTER") == "1" {
			fmt.Fprintln(os.Stderr, "integration tests need the control plane:", err)
			return 1
		}
		skip = err.Error()
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "gpushare-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binDir = dir
	schedulerBin = filepath.Join(dir, "gpushare-scheduler")
	extenderBin = filepath.Join(dir, "gpushare-extender")
	webhookBin = filepath.Join(dir, "gpushare-webhook")
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/gpushare-scheduler", "./cmd/gpushare-extender", "./cmd/gpushare-webhook")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building gpushare-scheduler:", err)
		return 1
	}
	return m.Run()
}

// startCluster starts a control plane for one test and stops it when the
// test ends; on failure it prints the tail of every log.
func startCluster(t testing.TB) *controlplane.Cluster {
	t.Helper()
	return startClusterWith(t, controlplane.Options{})
}

// startClusterWith is startCluster with options (their Tools are the
// tests').
func startClusterWith(t testing.TB, o controlplane.Options) *controlplane.Cluster {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
	o.Tools = tools
	c, err := controlplane.Start(context.Background(), o)
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.Processes() {
				t.Logf("--- %s log (tail) ---\n%s", p.Name, p.Tail(3000))
			}
		}
		c.Stop()
	})
	return c
}

// startPlugin starts a control plane and gpushare-scheduler with config
// (deploy/scheduler-config.yaml if nil) and returns the cluster, an admin
// client and the scheduler.
func startPlugin(t testing.TB, config []byte) (*controlplane.Cluster, kubernetes.Interface, *controlplane.Scheduler) {
	t.Helper()
	return startPluginWith(t, controlplane.Options{}, config)
}

// startPluginWith is startPlugin on a cluster started with o, with
// gpushare-scheduler's extra flags args.
func startPluginWith(t testing.TB, o controlplane.Options, config []byte, args ...string) (*controlplane.Cluster, kubernetes.Interface, *controlplane.Scheduler) {
	t.Helper()
	c := startClusterWith(t, o)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	if config == nil {
		config = readFile(t, "deploy/scheduler-config.yaml")
	}
	s, err := c.StartSchedulerAs(context.Background(), "gpushare-scheduler", schedulerBin, accountKubeconfig(t, c, "scheduler"), config, args...)
	if err != nil {
		t.Fatal(err)
	}
	notForbidden(t, s.Process)
	return c, client, s
}

// accountKubeconfig returns a kubeconfig with a token of the service
// account kube-system/gpushare-<component> ("scheduler", "extender"),
// with the roles of deploy/<component>-rbac.yaml (what the chart grants),
// applied on first use: the tests run gpushare's components with the
// privileges they have when installed, not an admin's.
func accountKubeconfig(t testing.TB, c *controlplane.Cluster, component string) string {
	t.Helper()
	kubeconfig, err := c.RoleKubeconfig(context.Background(), readFile(t, "deploy/"+component+"-rbac.yaml"),
		"kube-system", "gpushare-"+component, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// notForbidden fails the test, when it ends, if RBAC refused p a request:
// its roles lack a verb it uses.
func notForbidden(t testing.TB, p *controlplane.Process) {
	t.Cleanup(func() {
		for l := range strings.Lines(p.Tail(1 << 20)) {
			if strings.Contains(l, "is forbidden: User") {
				t.Errorf("%s was refused by RBAC: %s", p.Name, l)
			}
		}
	})
}

func readFile(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var errTimeout = errors.New("timed out")
