package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a server the control plane started.
type Process struct {
	Name string
	Cmd  *exec.Cmd
	// Log is the file its stdout and stderr go to.
	Log  string
	done chan struct{}
	err  error
}

// start runs bin with args, output to dir/logs/name.log, in its own
// process group so that Stop reaches its children too.
func start(dir, name, bin string, args ...string) (*Process, error) {
	return startEnv(dir, name, nil, bin, args...)
}

// startEnv is start with the environment env (this process's if nil).
func startEnv(dir, name string, env []string, bin string, args ...string) (*Process, error) {
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logs, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Kill sends SIGKILL to the process alone, by its PID, as `kill -9 PID`
// does: it gets no chance to clean up (a leader keeps its lease until the
// lease runs out). Kill returns once the process has ended.
func (p *Process) Kill() {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Tail returns the last n bytes of the process's log.
func (p *Process) Tail(n int64) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return string(b)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// and that no earlier call in this process returned.
func FreePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// handedOut holds every port FreePort and freePorts returned in this
// process. A port is free only until its server binds it: two clusters
// starting at once (the integration tests run side by side) could
// otherwise each be handed the port the other has not bound yet.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// listen is net.Listen; tests replace it with a kernel that hands out the
// same port again.
var listen = net.Listen

// freePorts returns n distinct ports as FreePort does.
func freePorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	// Hold them all open at once so they differ.
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		if len(ls) > n+1000 {
			return nil, fmt.Errorf("no free port on 127.0.0.1 that this process has not handed out already (%d handed out)", len(handedOut.ports))
		}
		l, err := listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		if port := l.Addr().(*net.TCPAddr).Port; !handedOut.ports[port] && !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	for _, port := range ports {
		handedOut.ports[port] = true
	}
	return ports, nil
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// WaitHTTP polls url until it answers 200, ctx ends or p (if not nil)
// exits. TLS certificates are not checked: the servers are on loopback.
func WaitHTTP(ctx context.Context, p *Process, url, token string) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// The servers use self-signed certificates on loopback.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback test servers
	}}
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited before %s was ready: %w\n%s", p.Name, url, p.err, p.Tail(4000))
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("waiting for %s: %s", url, strings.TrimSpace(last)), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
