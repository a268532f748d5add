// Command kubectl-inspect-gpushare is the kubectl plugin `kubectl inspect
// gpushare`: how much of each GPU is booked and by whom, and where a pod
// landed or why it waits. See docs/inspect.md.
package main

import (
	"context"
	"os"
	"os/signal"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/gpushare/gpushare/cmd/kubectl-inspect-gpushare/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cmd := app.NewCmd(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.ExecuteContext(ctx); err != nil {
		os.Exit(1)
	}
}
