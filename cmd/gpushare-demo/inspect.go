package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/gpushare/gpushare/cmd/kubectl-inspect-gpushare/app"
)

// printInspect shows the cluster through `kubectl inspect gpushare`, run
// in-process with the demo's kubeconfig: the table, the details (-d), and
// for each pod still waiting, why.
func printInspect(ctx context.Context, kubeconfig string, pods []corev1.Pod) error {
	views := [][]string{nil, {"-d"}}
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			views = append(views, []string{"pod", "-n", p.Namespace, p.Name})
		}
	}
	return printInspectViews(ctx, kubeconfig, views...)
}

// printInspectViews runs kubectl inspect gpushare with each args, after
// the command line it stands for.
func printInspectViews(ctx context.Context, kubeconfig string, views ...[]string) error {
	for _, args := range views {
		fmt.Printf("\n$ %s\n", strings.Join(append([]string{"kubectl inspect gpushare"}, args...), " "))
		cmd := app.NewCmd(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
		cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
		if err := cmd.ExecuteContext(ctx); err != nil {
			return fmt.Errorf("kubectl inspect gpushare %s: %w", strings.Join(args, " "), err)
		}
	}
	return nil
}
