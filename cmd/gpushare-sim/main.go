// Command gpushare-sim replays a GPU cluster trace through gpushare's
// allocation core and reports how well each policy packs.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-sim:", err)
		os.Exit(1)
	}
}
