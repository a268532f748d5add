package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// nodeBinaries are the real node's, beside the control plane's in bin/;
// the CNI plugins are in cni/.
var nodeBinaries = []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "runc"}

// RealNodeOptions configure StartRealNode.
type RealNodeOptions struct {
	// Name is the Node's.
	Name string
	// Images are OCI image layouts (hack/image, `make images`) imported
	// into containerd before the kubelet starts, by the reference each
	// layout's tag completes: ref "ghcr.io/gpushare/gpushare-node" and
	// a layout tagged v1 give ghcr.io/gpushare/gpushare-node:v1.
	Images map[string]string
	// SandboxImage is the pod sandbox's image, one of Images'.
	SandboxImage string
	// Mirror, host:port, serves every registry's images over plain
	// HTTP: containerd pulls from it what is not imported.
	Mirror string
	// Labels are the Node's, as the kubelet registers it.
	Labels map[string]string
	// Detached marks a node that outlives the process starting it (the
	// demo's): StopRealNode stops it, and no other run takes it for one
	// a dead run left.
	Detached bool
	// Private runs the node's kubelet and containerd in a mount namespace
	// of their own, with a bridge, addresses and a cgroup of their own
	// (PrivateKubeletRoot): the machine's second real node, which runs
	// beside the first (the tests' beside make demo's).
	Private bool
}

// A RealNode is a kubelet and containerd, with runc and the CNI bridge,
// that start pods' containers for real. Its directories are the
// kubelet's --root-dir, the CDI directory containerd reads, and
// containerd's own, all under the cluster's.
type RealNode struct {
	Name string
	// KubeletDir is the kubelet's --root-dir as this process sees it
	// (KubeletRoot, or PrivateKubeletRoot for a private node):
	// device-plugins/ and pod-resources/ are in it.
	KubeletDir string
	// CDIDir is where containerd reads CDI specs.
	CDIDir string
	// Socket is containerd's.
	Socket string

	c           *Cluster
	slot        slot
	dir         string
	kubeletCfg  string
	kubeletArgs []string
	healthz     string
	forward     net.Listener
	containerd  *Process
	kubelet     *Process
	restarts    int
	detached    bool
}

// Bridge is the pods' bridge on the node: their gateway, and the
// kubernetes Service's address.
func (n *RealNode) Bridge() string { return n.slot.bridge }

// KubeletRoot is the real node's kubelet --root-dir. The kubelet serves
// device plugins at KubeletRoot/device-plugins/kubelet.sock whatever its
// --root-dir, so it is the default, with the chart's default host paths.
const KubeletRoot = "/var/lib/kubelet"

// PrivateKubeletRoot is a private real node's kubelet directory as the
// machine sees it. Its kubelet and containerd, and the containers they
// start, see it at KubeletRoot, in a mount namespace of their own where
// a tmpfs hides the machine's /var/lib: the kubelet and the device
// plugins of its pods meet at KubeletRoot/device-plugins/kubelet.sock
// there, apart from any other kubelet's.
const PrivateKubeletRoot = "/run/gpushare-real-node"

// A slot is what a real node holds of the machine: its kubelet's
// directory, its pods' bridge and addresses, and its cgroup. A machine
// has two, so that a private real node runs beside the default one.
type slot struct {
	// root is the kubelet's directory as the machine sees it, with the
	// marker of the node that holds the slot.
	root string
	// private: the node's processes run in the mount namespace pinned at
	// ns, where root is mounted at KubeletRoot.
	private bool
	// bridge is the pods' bridge, with hardware address mac; gateway,
	// in a /16 of its own, is the bridge's address: the pods' gateway
	// and the node's InternalIP. The name is fixed: the slot's next real
	// node removes a bridge a killed run left. The hardware address is
	// locally administered: a Linux bridge left to itself takes the
	// lowest address of its ports, and when the pod holding that port
	// goes, the gateway's address changes under every other pod, whose
	// ARP entry still names the old one, and their connections to the
	// apiserver (through serviceIP) stall until the entry expires, about
	// 40 s. An address set on the bridge stays.
	bridge, mac, gateway string
	// cgroup is the kubelet's --cgroup-root: its pods' cgroups are under
	// it, apart from any other kubelet's, and what a dead run left there
	// is this node's to kill (killLeftovers).
	cgroup string
}

var (
	defaultSlot = slot{root: KubeletRoot, bridge: "gpushare0", mac: "02:42:0a:58:00:01", gateway: "10.88.0.1",
		cgroup: "gpushare-real-node"}
	privateSlot = slot{root: PrivateKubeletRoot, private: true, bridge: "gpushare1", mac: "02:42:0a:59:00:01",
		gateway: "10.89.0.1", cgroup: "gpushare-real-node-private"}
)

func slotOf(private bool) slot {
	if private {
		return privateSlot
	}
	return defaultSlot
}

// ns is where a private slot's mount namespace is pinned: a file in a
// directory mounted on itself, private, as a persistent namespace needs.
func (s slot) ns() string { return s.root + ".ns/mnt" }

// subnet is the pods' addresses: the /16 of the gateway.
func (s slot) subnet() string {
	ip := net.ParseIP(s.gateway).To4()
	return fmt.Sprintf("%d.%d.0.0/16", ip[0], ip[1])
}

// rootMarker marks a slot's root that a real node made, and may remove.
const rootMarker = ".gpushare-real-node"

// claim makes the slot's root for a real node, or refuses: a kubelet
// serves there, or it is some other kubelet's directory. A real node
// left by a run that died (killed, or timed out) is stopped first; a
// detached one (the demo's) is left to its owner.
func (s slot) claim() error {
	if sock, ok := s.serves(); ok {
		m, ok := s.readMarker()
		switch {
		case !ok:
			return fmt.Errorf("a kubelet already serves %s and it is not a gpushare real node's: not touching it", sock)
		case m.Detached:
			return fmt.Errorf("the demo's real node serves %s: one such real node per machine (stop it with make demo-down)", sock)
		case m.Owner.alive():
			return fmt.Errorf("a real node of another run (pid %d) serves %s: one such real node per machine", m.Owner.PID, sock)
		}
	}
	if err := s.stopRealNode(); err != nil {
		return err
	}
	if err := os.MkdirAll(s.root, 0o750); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.root, rootMarker), []byte("{}"), 0o600)
}

// enter makes a private slot's mount namespace, pinned at s.ns(), with a
// tmpfs on /var/lib and s.root mounted at KubeletRoot in it: the machine's
// own /var/lib (another real node's kubelet directory among it) is out of
// its processes' sight, and is never written.
func (s slot) enter() error {
	dir := filepath.Dir(s.ns())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("pinning the real node's mount namespace: %w", err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("pinning the real node's mount namespace: %w", err)
	}
	if err := os.WriteFile(s.ns(), nil, 0o600); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"unshare", "--mount=" + s.ns(), "--propagation", "private", "true"},
		{"nsenter", "--mount=" + s.ns(), "--", "mount", "-t", "tmpfs", "-o", "mode=755", "gpushare-real-node", "/var/lib"},
		{"nsenter", "--mount=" + s.ns(), "--", "mkdir", KubeletRoot},
		{"nsenter", "--mount=" + s.ns(), "--", "mount", "--bind", s.root, KubeletRoot},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("the real node's mount namespace: %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// leave unpins a private slot's mount namespace: it goes, with every
// mount in it, once no process is left in it.
func (s slot) leave() {
	dir := filepath.Dir(s.ns())
	_ = syscall.Unmount(s.ns(), syscall.MNT_DETACH)
	_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	_ = os.RemoveAll(dir)
}

// command is how the node runs bin with args: in its mount namespace, if
// it has one.
func (s slot) command(bin string, args ...string) (string, []string) {
	if !s.private {
		return bin, args
	}
	return "nsenter", append([]string{"--mount=" + s.ns(), "--", bin}, args...)
}

// marker is what a slot's marker file records of the real node that
// made it: enough for another process (gpushare-demo down), or the next
// real node after a run that died, to stop it (StopRealNode).
type marker struct {
	// Owner is the process that started the node; Detached is set when
	// the node outlives it (the demo's).
	Owner    proc `json:"owner"`
	Detached bool `json:"detached,omitempty"`
	// Kubelet and Containerd lead their process groups.
	Kubelet    proc `json:"kubelet"`
	Containerd proc `json:"containerd"`
	// Socket is containerd's, Dir the node's directory (absolute).
	Socket string `json:"socket,omitempty"`
	Dir    string `json:"dir,omitempty"`
}

// readMarker reads the slot's marker; false if there is none or it
// cannot be read.
func (s slot) readMarker() (marker, bool) {
	var m marker
	b, err := os.ReadFile(filepath.Join(s.root, rootMarker))
	if err != nil || json.Unmarshal(b, &m) != nil {
		return m, false
	}
	return m, true
}

// writeMarker writes m as the slot's marker.
func (s slot) writeMarker(m marker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.root, rootMarker), b, 0o600)
}

// proc names a process by its PID and its start time (in clock ticks
// since boot, /proc/PID/stat's 22nd field): a PID from a marker that
// outlived its process (a reboot, a crash) may name another process
// since, which must not be signalled.
type proc struct {
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"`
}

// procOf names process pid as it runs now.
func procOf(pid int) proc {
	start, _ := procStart(pid)
	return proc{PID: pid, Start: start}
}

// alive reports whether p still runs (not a zombie): the same PID, started
// at the same time.
func (p proc) alive() bool {
	if p.PID <= 1 || p.Start == 0 {
		return false
	}
	start, running := procStart(p.PID)
	return running && start == p.Start
}

// Runs reports whether process pid runs: it exists and is not a zombie,
// as an orphan stays until PID 1 reaps it, which some machines' PID 1
// does late.
func Runs(pid int) bool {
	_, running := procStart(pid)
	return running
}

// procStart returns when process pid started, and whether it runs (it
// exists and is not a zombie).
func procStart(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (the state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	return start, err == nil && f[0] != "Z"
}

// StopRealNode stops the real node that the marker in KubeletRoot (or,
// if private, PrivateKubeletRoot) records, if there is one, and removes
// what it made (stopNode). It refuses a directory that a real node did
// not make.
func StopRealNode(private bool) error { return slotOf(private).stopRealNode() }

func (s slot) stopRealNode() error {
	if _, err := os.Stat(filepath.Join(s.root, rootMarker)); err != nil {
		if entries, rerr := os.ReadDir(s.root); rerr == nil && len(entries) > 0 {
			return fmt.Errorf("%s exists and is not a gpushare real node's: this machine looks like a Kubernetes node; not touching it", s.root)
		}
		if s.private {
			// Pinned by a run that died before it wrote the marker.
			s.leave()
		}
		return nil
	}
	m, _ := s.readMarker() // unreadable: nothing to stop, but still remove what is known
	return s.stopNode(m)
}

// stopNode stops the kubelet, then the pods' containers (through the
// CRI, and by their cgroups and shims what that leaves), then containerd;
// and unmounts and removes what the node made: its mounts (its mount
// namespace, if private), its pod cgroups, the slot's root and the
// bridge.
func (s slot) stopNode(m marker) error {
	terminate(m.Kubelet)
	stopPods(m.Socket)
	terminate(m.Containerd)
	s.killLeftovers(m.Socket)
	if m.Dir != "" {
		unmountUnder(m.Dir)
	}
	unmountUnder(s.root)
	if s.private {
		s.leave()
	}
	s.removeCgroups()
	_ = exec.Command("ip", "link", "del", s.bridge).Run()
	return os.RemoveAll(s.root)
}

// RealNodeServes reports whether a kubelet serves device plugins in
// KubeletRoot (or, if private, PrivateKubeletRoot): a real node, or
// another kubelet, holds it.
func RealNodeServes(private bool) bool {
	_, ok := slotOf(private).serves()
	return ok
}

// serves returns the kubelet's device plugin socket in the slot's root,
// and whether a kubelet answers on it.
func (s slot) serves() (string, bool) {
	sock := filepath.Join(s.root, "device-plugins", "kubelet.sock")
	conn, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return sock, false
	}
	_ = conn.Close()
	return sock, true
}

// RealNodeDir returns the directory of the real node that the marker in
// KubeletRoot (or, if private, PrivateKubeletRoot) records; "" if none.
func RealNodeDir(private bool) string {
	m, _ := slotOf(private).readMarker()
	return m.Dir
}

// terminate stops process group p: SIGTERM, then SIGKILL after 30 s; not
// if p no longer runs.
func terminate(p proc) {
	if !p.alive() || syscall.Kill(-p.PID, syscall.SIGTERM) != nil {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for p.alive() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if p.alive() {
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	}
}

// stopPods stops and removes every pod sandbox of the containerd on
// socket, if it answers: their containers, and their network namespaces.
func stopPods(socket string) {
	if socket == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = cri(socket, func(rt runtimeapi.RuntimeServiceClient) error {
		pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id})
			_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id})
		}
		return nil
	})
}

// killLeftovers kills what outlives containerd when the CRI could not
// stop it (containerd killed or not answering): the processes in the
// node's pod cgroups (under the slot's cgroup, nobody else's), then the
// shims of the containerd on socket.
func (s slot) killLeftovers(socket string) {
	for _, root := range s.cgroupRoots() {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for f := range strings.FieldsSeq(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
	if socket == "" {
		return
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") || !slices.Contains(args, socket) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// RealNodeTools reports whether the real node's binaries are built.
func (t Tools) RealNodeTools() error {
	for _, b := range nodeBinaries {
		if _, err := os.Stat(t.Bin(b)); err != nil {
			return fmt.Errorf("%w: %s missing", ErrNoTools, t.Bin(b))
		}
	}
	if _, err := os.Stat(filepath.Join(t.Dir, "cni", "bridge")); err != nil {
		return fmt.Errorf("%w: the CNI plugins are missing", ErrNoTools)
	}
	return nil
}

// StartRealNode starts containerd, imports o.Images and starts a kubelet
// that registers the Node o.Name, and waits until the Node is Ready. It
// needs root. Stop (the cluster's) stops the pods' containers too.
//
// The kubelet tolerates cgroup v1 (failCgroupV1: false), uses the
// cgroupfs driver and serves on the pods' gateway address; it takes the
// apiserver's requests (exec, logs) from a client certificate of the
// cluster's kubelet client CA only. It lacks KwokAnnotation: kwok, if
// the cluster runs it, leaves it alone. On error StartRealNode undoes
// what it did.
func (c *Cluster) StartRealNode(ctx context.Context, o RealNodeOptions) (_ *RealNode, err error) {
	if err := c.Tools.RealNodeTools(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("a real node needs root: the kubelet and containerd manage cgroups, mounts and network namespaces")
	}
	s := slotOf(o.Private)
	if s.private {
		for _, tool := range []string{"unshare", "nsenter", "mount"} {
			if _, err := exec.LookPath(tool); err != nil {
				return nil, fmt.Errorf("a private real node needs util-linux's %s: %w", tool, err)
			}
		}
	}
	dir, err := filepath.Abs(c.path("nodes", o.Name))
	if err != nil {
		return nil, err
	}
	n := &RealNode{Name: o.Name, c: c, slot: s, dir: dir, KubeletDir: s.root, detached: o.Detached}
	if err := s.claim(); err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	defer func() {
		if err != nil {
			n.stop()
			c.nodes = c.nodes[:len(c.nodes)-1]
		}
	}()
	if s.private {
		if err := s.enter(); err != nil {
			return nil, err
		}
	}
	n.CDIDir = filepath.Join(n.dir, "cdi")
	n.Socket = filepath.Join(n.dir, "containerd", "containerd.sock")
	for _, d := range []string{n.CDIDir, filepath.Join(n.dir, "containerd"), filepath.Join(n.dir, "cni"),
		filepath.Join(n.dir, "certs.d", "_default"), filepath.Join(n.dir, "pod-logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := s.makeCgroups(); err != nil {
		return nil, err
	}
	if err := n.startNetwork(); err != nil {
		return nil, err
	}
	if err := n.writeContainerdConfig(o); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	for ref, layout := range o.Images {
		if err := n.Import(ctx, ref, layout); err != nil {
			return nil, err
		}
	}
	if err := n.writeKubeletConfig(o); err != nil {
		return nil, err
	}
	if err := n.startKubelet(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// containerdConfig is containerd 2's (version 3): CRI with CDI on, the
// CNI bridge, pulls through the mirror, and the network namespaces under
// its state directory rather than the host's /var/run/netns. Where root
// lacks CAP_SYS_RESOURCE (some sandboxed machines), no process may lower
// its OOM score below where it is, and runc fails every pod sandbox
// ("failed to update /proc/self/oom_score_adj: Permission denied")
// unless containerd keeps the kubelet's scores at or above its own
// (restrict_oom_score_adj).
const containerdConfig = `version = 3
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[4]q
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = %[5]q
  [plugins.'io.containerd.cri.v1.runtime']
    enable_cdi = true
    cdi_spec_dirs = [%[6]q]
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = %[9]t
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[7]q]
      conf_dir = %[8]q
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
`

// The pods' network: one bridge on the node, addresses from host-local,
// the default route through the bridge's address. Not isGateway, which
// would also turn on the host's IP forwarding: the pods need reach only
// the node's own addresses.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "gpushare",
  "plugins": [{"type": "bridge", "bridge": %q, "isGateway": false, "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "gateway": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}}]
}
`

// serviceIP is the kubernetes Service's cluster IP: the first of the
// apiserver's --service-cluster-ip-range, the address pods' in-cluster
// clients (KUBERNETES_SERVICE_HOST) dial.
const serviceIP = "10.96.0.1"

// startNetwork makes the pods' bridge before the CNI plugin does, with
// the gateway's address (the pods' gateway, and the node's InternalIP,
// where the kubelet serves the apiserver: a node's address may not be
// loopback; only the node reaches it) and the kubernetes Service's, and
// forwards connections to serviceIP:443 to the apiserver on loopback:
// what kube-proxy does for pods on a real cluster. The bridge joins no
// other interface: only the node's pods reach it. The forwarder takes
// only connections that come in on the bridge, so that each real node's
// pods reach their own cluster's apiserver at serviceIP.
func (n *RealNode) startNetwork() error {
	bridge := n.slot.bridge
	for _, args := range [][]string{
		{"link", "add", bridge, "address", n.slot.mac, "type", "bridge"},
		{"addr", "add", n.slot.gateway + "/16", "dev", bridge},
		{"addr", "add", serviceIP + "/32", "dev", bridge},
		{"link", "set", bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	lc := net.ListenConfig{Control: func(_, _ string, raw syscall.RawConn) error {
		var err error
		if cerr := raw.Control(func(fd uintptr) {
			err = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, bridge)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	l, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort(serviceIP, "443"))
	if err != nil {
		return fmt.Errorf("the kubernetes Service's address: %w", err)
	}
	n.forward = l
	api := strings.TrimPrefix(n.c.Host, "https://")
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = in.Close() }()
				out, err := net.Dial("tcp", api)
				if err != nil {
					return
				}
				defer func() { _ = out.Close() }()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return nil
}

func (n *RealNode) writeContainerdConfig(o RealNodeOptions) error {
	cfg := fmt.Sprintf(containerdConfig, filepath.Join(n.dir, "containerd", "root"), filepath.Join(n.dir, "containerd", "state"),
		n.Socket, o.SandboxImage, filepath.Join(n.dir, "certs.d"), n.CDIDir,
		filepath.Join(n.c.Tools.Dir, "cni"), filepath.Join(n.dir, "cni"), !canLowerOOMScore())
	if err := os.WriteFile(filepath.Join(n.dir, "containerd.toml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	cni := fmt.Sprintf(cniConfig, n.slot.bridge, n.slot.subnet(), n.slot.gateway, filepath.Join(n.dir, "cni-ipam"))
	if err := os.WriteFile(filepath.Join(n.dir, "cni", "10-gpushare.conflist"), []byte(cni), 0o600); err != nil {
		return err
	}
	hosts := ""
	if o.Mirror != "" {
		hosts = fmt.Sprintf("[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", o.Mirror)
	}
	return os.WriteFile(filepath.Join(n.dir, "certs.d", "_default", "hosts.toml"), []byte(hosts), 0o600)
}

// kubeletConfig is the KubeletConfiguration. Eviction is off: the
// machine's disk and memory are the tests', not the pods'.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%[1]s
address: %[6]s
port: %[2]d
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[4]q}
authorization: {mode: AlwaysAllow}
failSwapOn: false
evictionHard: {memory.available: "0%%", nodefs.available: "0%%", imagefs.available: "0%%"}
podLogsDir: %[5]q
resolvConf: ""
serializeImagePulls: false
syncFrequency: 10s
nodeStatusReportFrequency: 10s
cgroupRoot: /%[7]s
`

func (n *RealNode) writeKubeletConfig(o RealNodeOptions) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(kubeletConfig, n.Socket, ports[0], ports[1], n.c.kubeletClientCA, filepath.Join(n.dir, "pod-logs"), n.slot.gateway, n.slot.cgroup)
	n.kubeletCfg = filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(n.kubeletCfg, []byte(cfg), 0o600); err != nil {
		return err
	}
	var labels []string
	for k, v := range o.Labels {
		labels = append(labels, k+"="+v)
	}
	// A private node's kubelet sees its directory at KubeletRoot too.
	n.kubeletArgs = []string{"--config=" + n.kubeletCfg, "--kubeconfig=" + n.c.Kubeconfig, "--root-dir=" + KubeletRoot,
		"--cert-dir=" + filepath.Join(n.dir, "kubelet-pki"), "--hostname-override=" + n.Name, "--node-ip=" + n.slot.gateway,
		"--node-labels=" + strings.Join(labels, ","), "--v=2"}
	n.healthz = "http://" + hostPort(ports[1]) + "/healthz"
	return nil
}

func (n *RealNode) startContainerd(ctx context.Context) error {
	bin, args := n.slot.command(n.c.Tools.Bin("containerd"), "--config="+filepath.Join(n.dir, "containerd.toml"))
	p, err := n.c.runEnv(n.logName("containerd"), n.pathEnv(), bin, args...)
	if err != nil {
		return err
	}
	n.containerd = p
	n.recordPIDs()
	return n.waitCRI(ctx)
}

// waitCRI waits until containerd answers on its CRI socket.
func (n *RealNode) waitCRI(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		err := n.cri(func(rt runtimeapi.RuntimeServiceClient) error {
			_, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
			return err
		})
		if err == nil {
			return nil
		}
		if n.containerd.Exited() {
			return fmt.Errorf("containerd exited: %s", n.containerd.Tail(2000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd did not answer: %w; %s", err, n.containerd.Tail(2000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *RealNode) startKubelet(ctx context.Context) error {
	bin, args := n.slot.command(n.c.Tools.Bin("kubelet"), n.kubeletArgs...)
	p, err := n.c.runEnv(n.logName("kubelet"), n.pathEnv(), bin, args...)
	if err != nil {
		return err
	}
	n.kubelet = p
	n.recordPIDs()
	started := time.Now()
	if err := WaitHTTP(ctxTimeout(ctx, 2*time.Minute), p, n.healthz, ""); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	return n.waitReady(ctx, started)
}

// recordPIDs writes the slot's marker: what StopRealNode needs to stop
// this node from another process, or after this run dies.
func (n *RealNode) recordPIDs() {
	if err := n.slot.writeMarker(n.marker()); err != nil {
		fmt.Fprintf(os.Stderr, "recording the real node in %s: %v\n", n.slot.root, err)
	}
}

// marker is what the slot's marker records of n.
func (n *RealNode) marker() marker {
	m := marker{Owner: procOf(os.Getpid()), Detached: n.detached, Socket: n.Socket, Dir: n.dir}
	if n.kubelet != nil && !n.kubelet.Exited() {
		m.Kubelet = procOf(n.kubelet.Cmd.Process.Pid)
	}
	if n.containerd != nil && !n.containerd.Exited() {
		m.Containerd = procOf(n.containerd.Cmd.Process.Pid)
	}
	return m
}

// waitReady waits until the Node reports Ready in a heartbeat of a
// kubelet started at started, or later: after a restart the condition
// still says what the previous kubelet last reported.
func (n *RealNode) waitReady(ctx context.Context, started time.Time) error {
	client, err := n.c.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		node, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(started.Truncate(time.Second)) {
					return nil
				}
			}
		}
		if n.kubelet.Exited() {
			return fmt.Errorf("the kubelet exited: %s", n.kubelet.Tail(3000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready: %s", n.Name, n.kubelet.Tail(3000))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// logName names the nth start of a process of the node.
func (n *RealNode) logName(what string) string {
	n.restarts++
	return fmt.Sprintf("%s-%s-%d", what, n.Name, n.restarts)
}

// pathEnv puts the tools first on PATH: containerd finds its shim there,
// and the shim runc.
func (n *RealNode) pathEnv() []string {
	return append(os.Environ(), "PATH="+filepath.Join(n.c.Tools.Dir, "bin")+":"+os.Getenv("PATH"))
}

// RestartKubelet stops the kubelet (SIGTERM) and starts it again with the
// same configuration; running containers are left alone. It returns once
// the Node is Ready again.
func (n *RealNode) RestartKubelet(ctx context.Context) error {
	n.kubelet.Stop(30 * time.Second)
	return n.startKubelet(ctx)
}

// RestartContainerd stops containerd (SIGTERM) and starts it again; the
// containers keep running under their shims.
func (n *RealNode) RestartContainerd(ctx context.Context) error {
	n.containerd.Stop(30 * time.Second)
	return n.startContainerd(ctx)
}

// Import imports the OCI image layout dir into containerd's CRI
// namespace as ref:<the layout's tag>.
func (n *RealNode) Import(ctx context.Context, ref, layout string) error {
	archive := filepath.Join(n.dir, filepath.Base(layout)+".tar")
	if out, err := exec.CommandContext(ctx, "tar", "-C", layout, "-cf", archive, ".").CombinedOutput(); err != nil {
		return fmt.Errorf("packing %s: %w: %s", layout, err, out)
	}
	defer func() { _ = os.Remove(archive) }()
	out, err := exec.CommandContext(ctx, n.c.Tools.Bin("ctr"), "--address="+n.Socket, "--namespace=k8s.io",
		"images", "import", "--base-name="+ref, archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing %s as %s: %w: %s", layout, ref, err, out)
	}
	return nil
}

// cri calls fn with a CRI runtime client on containerd's socket.
func (n *RealNode) cri(fn func(runtimeapi.RuntimeServiceClient) error) error {
	return cri(n.Socket, fn)
}

// cri calls fn with a CRI runtime client on socket.
func cri(socket string, fn func(runtimeapi.RuntimeServiceClient) error) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	return fn(runtimeapi.NewRuntimeServiceClient(conn))
}

// stop stops the kubelet, then every pod sandbox through the CRI (their
// containers, and the network namespaces), then containerd, and removes
// what the node made (StopRealNode's work, on the processes this run
// holds).
func (n *RealNode) stop() {
	if n.kubelet != nil {
		n.kubelet.Stop(30 * time.Second)
	}
	if n.containerd != nil && !n.containerd.Exited() {
		stopPods(n.Socket)
		n.containerd.Stop(30 * time.Second)
	}
	if n.forward != nil {
		_ = n.forward.Close()
	}
	if err := n.slot.stopNode(n.marker()); err != nil {
		fmt.Fprintf(os.Stderr, "removing the real node: %v\n", err)
	}
}

// cgroupRoots returns the slot's cgroup directory in each cgroup
// hierarchy mounted under /sys/fs/cgroup (one per v1 controller, or the
// v2 hierarchy itself).
func (s slot) cgroupRoots() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{filepath.Join("/sys/fs/cgroup", s.cgroup)}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var roots []string
	for _, e := range entries {
		// Controllers mounted together appear once, plus symbolic links.
		if e.IsDir() && e.Type()&os.ModeSymlink == 0 {
			roots = append(roots, filepath.Join("/sys/fs/cgroup", e.Name(), s.cgroup))
		}
	}
	return roots
}

// makeCgroups makes the slot's cgroup in every hierarchy: the kubelet
// refuses a --cgroup-root that does not exist.
func (s slot) makeCgroups() error {
	for _, root := range s.cgroupRoots() {
		if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("making the real node's cgroup %s: %w", root, err)
		}
	}
	return nil
}

// removeCgroups removes the slot's cgroup and the cgroups under it,
// deepest first (a cgroup is removed with rmdir once it holds no
// process).
func (s slot) removeCgroups() {
	for _, root := range s.cgroupRoots() {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(dirs[i])
		}
	}
}

// unmountUnder lazily unmounts every mount point under dir, deepest
// first, so that the directory can be removed.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// runEnv is Run with the environment env.
func (c *Cluster) runEnv(name string, env []string, bin string, args ...string) (*Process, error) {
	p, err := startEnv(c.Dir, name, env, bin, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// canLowerOOMScore reports whether this process holds CAP_SYS_RESOURCE,
// which lowering an OOM score below the current one needs.
func canLowerOOMScore() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			const capSysResource = 24
			return err == nil && caps&(1<<capSysResource) != 0
		}
	}
	return false
}

// StandInDevices makes dir/nvidia0 ... nvidia<n-1>, character devices
// with /dev/null's numbers: stand-ins for simulated GPUs' device nodes
// (the simulation's deviceDir), which CDI specs can hand containers
// harmlessly.
func StandInDevices(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	const null = 1<<8 | 3 // major 1, minor 3
	for i := range n {
		path := filepath.Join(dir, fmt.Sprintf("nvidia%d", i))
		err := syscall.Mknod(path, syscall.S_IFCHR|0o666, null)
		if errors.Is(err, os.ErrExist) {
			// Made by an earlier run: only a character device will do.
			if info, serr := os.Stat(path); serr == nil && info.Mode()&os.ModeCharDevice != 0 {
				err = nil
			}
		}
		if err != nil {
			return fmt.Errorf("making the stand-in device %s: %w", path, err)
		}
	}
	return nil
}
