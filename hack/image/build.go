package main

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// versionPkg holds the variables the linker sets (see pkg/version).
const versionPkg = "github.com/gpushare/gpushare/pkg/version"

// buildBinaries builds each image's command into dir, for linux/amd64:
// -trimpath, so that no path of the build machine is in them; no symbol
// table or DWARF (-s -w), which the images do not need for their stack
// traces; the version and commit through -X. Static commands with
// CGO_ENABLED=0; gpushare-node with cgo, against the build machine's
// glibc.
func buildBinaries(ctx context.Context, logger *slog.Logger, o options, want []imageSpec, dir string) error {
	ldflags := fmt.Sprintf("-s -w -X %s.version=%s -X %s.commit=%s", versionPkg, o.version, versionPkg, o.commit)
	for _, cgo := range []bool{false, true} {
		var pkgs []string
		for _, s := range want {
			if s.cgo == cgo {
				pkgs = append(pkgs, s.pkgOf())
				for _, a := range s.also {
					pkgs = append(pkgs, "./cmd/"+a)
				}
			}
		}
		if len(pkgs) == 0 {
			continue
		}
		logger.Info("Building", "packages", pkgs, "cgo", cgo)
		args := append([]string{"build", "-trimpath", "-ldflags", ldflags, "-o", dir + "/"}, pkgs...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = o.root
		cgoEnv := "CGO_ENABLED=0"
		if cgo {
			cgoEnv = "CGO_ENABLED=1"
		}
		cmd.Env = append(os.Environ(), cgoEnv, "GOOS=linux", "GOARCH=amd64")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
		}
	}
	for _, s := range want {
		for _, name := range append([]string{s.name}, s.also...) {
			if err := checkLinking(filepath.Join(dir, name), s.cgo); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkLinking makes sure a static image gets a static binary: one that
// asks for a dynamic loader would not start in it.
func checkLinking(bin string, cgo bool) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	libs, err := f.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("%s: %w", bin, err)
	}
	if !cgo && len(libs) > 0 {
		return fmt.Errorf("%s: want a static binary, it needs %q", bin, libs)
	}
	return nil
}
