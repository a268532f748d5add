package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// options says what to build from where.
type options struct {
	root    string    // the repository
	out     string    // directory of the OCI layouts
	version string    // the version stamped into binaries, and the images' tag
	commit  string    // the commit built
	created time.Time // the images' creation time and every file's mtime
	cache   string    // downloaded Debian packages
	images  []string  // names of the images to build
}

// complete fills in what was left empty from the repository: its root,
// HEAD, the version (hack/image/version.sh) and the creation time, which
// is $SOURCE_DATE_EPOCH if set, else HEAD's commit time.
func (o *options) complete(ctx context.Context) error {
	var err error
	if o.root == "" {
		if o.root, err = git(ctx, "", "rev-parse", "--show-toplevel"); err != nil {
			return err
		}
	}
	if o.commit, err = git(ctx, o.root, "rev-parse", "HEAD"); err != nil {
		return err
	}
	if o.version == "" {
		if o.version, err = output(ctx, o.root, filepath.Join(o.root, "hack/image/version.sh")); err != nil {
			return err
		}
	}
	if err := checkTag(o.version); err != nil {
		return err
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git(ctx, o.root, "log", "-1", "--format=%ct"); err != nil {
			return err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("creation time %q: want seconds since 1970: %w", epoch, err)
	}
	o.created = time.Unix(secs, 0).UTC()
	if o.cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("cache of Debian packages: %w", err)
		}
		o.cache = filepath.Join(home, ".cache", "gpushare", "debs")
	}
	if len(o.images) == 0 {
		o.images = imageNames()
	}
	for _, name := range o.images {
		if _, ok := specFor(name); !ok {
			var all []string
			for _, s := range specs() {
				all = append(all, s.name)
			}
			return fmt.Errorf("unknown image %q: want one of %s", name, strings.Join(all, ", "))
		}
	}
	return nil
}

// checkTag refuses a version that cannot be an image tag.
func checkTag(v string) error {
	if v == "" || len(v) > 128 {
		return fmt.Errorf("version %q: want 1 to 128 characters", v)
	}
	for i, c := range v {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || (i > 0 && (c == '.' || c == '-'))
		if !ok {
			return fmt.Errorf("version %q: not a valid image tag ([A-Za-z0-9_][A-Za-z0-9_.-]*)", v)
		}
	}
	return nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	return output(ctx, dir, "git", args...)
}

// output runs a command and returns its trimmed standard output.
func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
