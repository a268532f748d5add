// Package mps runs the NVIDIA MPS control daemon for a node's GPUs and
// keeps it running: start in the foreground, health checks through the
// control client, restart with backoff when it dies or stops answering,
// and a clean "quit" on shutdown. Containers reach it through the pipe
// directory, which the device plugin mounts and names in
// CUDA_MPS_PIPE_DIRECTORY, with limits sized from each container's own
// request.
//
// MPS clients and servers share memory through /dev/shm. With ShmDir set,
// the daemon and the servers it starts see ShmDir as /dev/shm (in a mount
// namespace of their own), and the device plugin mounts the same
// directory at /dev/shm in each client container, so clients need no
// hostIPC.
package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// The daemon's directories on the host by default: the pipe directory is
// the KETI system's path, which its pod specs mount.
const (
	DefaultPipeDir = "/tmp/nvidia-mps"
	DefaultLogDir  = "/var/log/nvidia-mps"
	DefaultShmDir  = "/run/gpushare/mps-shm"
)

// Daemon supervises nvidia-cuda-mps-control.
type Daemon struct {
	// Control is the nvidia-cuda-mps-control binary.
	Control string
	// PipeDir and LogDir are the daemon's CUDA_MPS_PIPE_DIRECTORY and
	// CUDA_MPS_LOG_DIRECTORY.
	PipeDir, LogDir string
	// ShmDir, if set, is the directory the daemon and its servers see as
	// /dev/shm. Binding it needs CAP_SYS_ADMIN, and the binary must call
	// Shim first in main.
	ShmDir string
	// Devices, if set, limits the daemon to these GPU UUIDs
	// (CUDA_VISIBLE_DEVICES).
	Devices []string
	// Check is the health check period; 10 s if 0.
	Check  time.Duration
	Logger klog.Logger
}

func (d *Daemon) env() []string {
	env := append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+d.PipeDir, "CUDA_MPS_LOG_DIRECTORY="+d.LogDir)
	if len(d.Devices) > 0 {
		env = append(env, "CUDA_VISIBLE_DEVICES="+strings.Join(d.Devices, ","))
	}
	return env
}

// command sends one command to the running daemon through the control
// client and returns its answer.
func (d *Daemon) command(ctx context.Context, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, d.Control) //nolint:gosec // the configured MPS control binary
	c.Env = d.env()
	c.Stdin = strings.NewReader(cmd + "\n")
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return strings.TrimSpace(out.String()), err
}

// Healthy asks the daemon for its server list: it answers while it runs.
func (d *Daemon) Healthy(ctx context.Context) error {
	if out, err := d.command(ctx, "get_server_list"); err != nil {
		return fmt.Errorf("MPS control daemon does not answer: %w (%s)", err, out)
	}
	return nil
}

// Run starts the daemon and keeps it running until ctx ends, then asks it
// to quit (and kills it if it does not within 10 s).
func (d *Daemon) Run(ctx context.Context) error {
	for _, dir := range []string{d.PipeDir, d.LogDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // containers connect to the pipes
			return err
		}
	}
	if d.ShmDir != "" {
		// Like /dev/shm: clients run as any user.
		if err := os.MkdirAll(d.ShmDir, 0o755); err != nil { //nolint:gosec // shared with every MPS client
			return err
		}
		if err := os.Chmod(d.ShmDir, 0o777|os.ModeSticky); err != nil { //nolint:gosec // shared with every MPS client
			return err
		}
	}
	check := d.Check
	if check == 0 {
		check = 10 * time.Second
	}
	for restarts := 0; ; restarts++ {
		err := d.runOnce(ctx, check)
		if ctx.Err() != nil {
			return nil
		}
		wait := min(time.Duration(1<<min(restarts, 5))*time.Second, 30*time.Second)
		d.Logger.Error(err, "MPS control daemon stopped; restarting", "in", wait, "restarts", restarts+1)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// runOnce runs the daemon in the foreground until it exits, fails its
// health check, or ctx ends.
func (d *Daemon) runOnce(ctx context.Context, check time.Duration) error {
	c := d.daemonCommand()
	c.Env = d.env()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", d.Control, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	d.Logger.Info("MPS control daemon started", "pid", c.Process.Pid, "pipeDir", d.PipeDir, "shmDir", d.ShmDir)
	tick := time.NewTicker(check)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %w: %s", err, tail(out.String()))
		case <-tick.C:
			if err := d.Healthy(ctx); err != nil {
				if ctx.Err() != nil {
					// The check failed because ctx ended while it ran:
					// shut down as cleanly as when ctx ends between checks.
					return d.quit(c, exited)
				}
				_ = c.Process.Kill()
				return errors.Join(err, <-exited)
			}
		case <-ctx.Done():
			return d.quit(c, exited)
		}
	}
}

// quit asks the daemon c to quit, which tells its servers to finish, and
// kills it if it has not exited within 10 s.
func (d *Daemon) quit(c *exec.Cmd, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.command(ctx, "quit"); err != nil {
		d.Logger.Error(err, "Asking the MPS control daemon to quit")
	}
	select {
	case err := <-exited:
		d.Logger.Info("MPS control daemon stopped", "exit", err)
		return nil
	case <-ctx.Done():
		_ = c.Process.Kill()
		return errors.Join(errors.New("MPS control daemon did not quit in 10 s; killed"), <-exited)
	}
}

func tail(s string) string {
	if len(s) > 500 {
		return s[len(s)-500:]
	}
	return s
}
