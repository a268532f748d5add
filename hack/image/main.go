// Command image builds gpushare's OCI images (gpushare-scheduler,
// gpushare-extender and gpushare-node) into OCI image layouts, one
// directory each, with no container engine and no registry: the binaries
// come from go build, glibc and CA certificates from pinned Debian
// packages, and go-containerregistry assembles them. The same commit
// gives the same image digests. See docs/images.md.
//
// Usage, from the repository root (make images):
//
//	go -C hack/image run . --out bin/images
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, logger, os.Args[1:]); err != nil {
		logger.Error("Building images failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.root, "root", "", "the gpushare repository to build (default: the one this command runs in)")
	fs.StringVar(&o.out, "out", "bin/images", "directory for the OCI layouts, one per image; relative to --root")
	fs.StringVar(&o.version, "version", "", "version stamped into the binaries and the images' tag (default: hack/image/version.sh)")
	fs.StringVar(&o.cache, "cache", "", "cache of downloaded Debian packages (default: ~/.cache/gpushare/debs)")
	names := fs.String("images", strings.Join(imageNames(), ","), "comma-separated images to build")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for n := range strings.SplitSeq(*names, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.images = append(o.images, n)
		}
	}
	if err := o.complete(ctx); err != nil {
		return err
	}
	if !filepath.IsAbs(o.out) {
		o.out = filepath.Join(o.root, o.out)
	}
	built, err := build(ctx, logger, o)
	if err != nil {
		return err
	}
	for _, b := range built {
		fmt.Printf("%s\t%s\t%s\n", b.layout, b.digest, b.ref)
	}
	return nil
}
