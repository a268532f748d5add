package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"sigs.k8s.io/yaml"
)

// chart is the chart's directory in the repository.
const chart = "charts/gpushare"

// helmBin returns the pinned helm (`make helm`: $GPUSHARE_HELM).
func helmBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("GPUSHARE_HELM")
	if bin == "" {
		t.Fatal("GPUSHARE_HELM is not set: run the chart tests with `make chart-test`, which builds helm")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm: %v (run `make helm`)", err)
	}
	return bin
}

// helm runs helm in the repository root and returns its standard output;
// it fails the test with helm's error output unless fail is expected.
func helm(t testing.TB, args ...string) []byte {
	t.Helper()
	out, err := helmErr(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func helmErr(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Dir = root
	// Nothing of the user's helm configuration or cache.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, &helmError{err: err, stderr: stderr.String()}
	}
	return out, nil
}

type helmError struct {
	err    error
	stderr string
}

func (e *helmError) Error() string { return e.err.Error() + ": " + e.stderr }

// render runs helm template in namespace ns with --set flags and decodes
// every object (a kind the client does not know fails the test, but for
// the Prometheus Operator's ServiceMonitor and PrometheusRule, returned as
// nothing).
func render(t *testing.T, ns string, set ...string) []runtime.Object {
	t.Helper()
	args := []string{"template", "gpushare", chart, "--namespace", ns}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return decodeAll(t, helm(t, args...))
}

func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

// The toggles the chart's values offer, each rendered and installed.
var chartToggles = map[string][]string{
	"default":          nil,
	"extender":         {"mode=extender"},
	"replace-default":  {"scheduler.replaceDefault=true"},
	"ha":               {"scheduler.replicas=2", "scheduler.podDisruptionBudget.enabled=true"},
	"mps":              {"node.mps=true"},
	"whole-card":       {"node.wholeCard=true"},
	"hook-policy":      {"hookPolicy.enabled=true"},
	"dra":              {"dra.enabled=true"},
	"defrag":           {"gpushare.defrag.enabled=true"},
	"service-monitor":  {"serviceMonitor.enabled=true"},
	"monitoring":       {"grafana.dashboard.enabled=true", "prometheusRule.enabled=true"},
	"no-alloc-policy":  {"allocationPolicy.enabled=false"},
	"runtime-class":    {"node.runtimeClassName=nvidia"},
	"own-extender-tls": {"mode=extender", "extender.tls.secretName=my-tls"},
	"extender-service": {"mode=extender", "extender.beside=false"},
	"quota":            {"quota.enabled=true"},
	"scheduler-env":    {"scheduler.env[0].name=GOGC", "scheduler.env[0].value=100"},
	"node-pools": {"node.pools[0].name=whole-card", "node.pools[0].wholeCard=true",
		"node.pools[1].name=mps", "node.pools[1].mps=true"},
}

// TestChartLint: helm lint passes on the chart with every toggle, and
// values that cannot work fail with a reason.
func TestChartLint(t *testing.T) {
	t.Parallel()
	for name, set := range chartToggles {
		args := []string{"lint", "--strict", chart}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if _, err := helmErr(t, args...); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, c := range map[string]struct {
		set  []string
		want string
		args []string
	}{
		"unknown mode":         {set: []string{"mode=plugin"}, want: `mode: "plugin" is neither scheduler nor extender`},
		"two extenders":        {set: []string{"mode=extender", "extender.replicas=2"}, want: "extender.replicas: must be 1"},
		"two without election": {set: []string{"scheduler.leaderElection.enabled=false", "scheduler.replicas=2"}, want: "needs scheduler.leaderElection.enabled"},
		"no profile":           {set: []string{"scheduler.schedulerNames=null"}, want: "gpushare-scheduler would serve no pod"},
		"hook route unknown":   {set: []string{"hookPolicy.enabled=maybe"}, want: `hookPolicy.enabled: "maybe" is not true, false or auto`},
		"pool without name":    {set: []string{"node.pools[0].wholeCard=true"}, want: `node.pools: name "<nil>" is not a DNS label`},
		"pool named twice":     {set: []string{"node.pools[0].name=a", "node.pools[1].name=a"}, want: `two pools are named "a"`},
		"pool value unknown":   {set: []string{"node.pools[0].name=a", "node.pools[0].wholecard=true"}, want: `node.pools[a]: "wholecard" is not a value of node`},
		"scheduler on 1.36":    {args: []string{"--kube-version", "1.36"}, want: "mode: scheduler needs Kubernetes 1.37"},
		"enforcement unknown":  {set: []string{"node.enforcement=strict"}, want: `node.enforcement: "strict" is not none, mps or hami-core`},
		"mps enforcement without MPS": {set: []string{"node.pools[0].name=a", "node.pools[0].enforcement=mps"},
			want: "node.pools[a].enforcement: mps needs mps: true"},
		"replaceDefault in the extender": {set: []string{"mode=extender", "scheduler.replaceDefault=true"},
			want: "scheduler.replaceDefault: applies to mode scheduler"},
		"defrag in the extender": {set: []string{"mode=extender", "gpushare.defrag.enabled=true"},
			want: "gpushare.defrag.enabled: needs mode scheduler"},
		"dra on 1.36": {set: []string{"mode=extender", "dra.enabled=true"}, args: []string{"--kube-version", "1.36"},
			want: "dra.enabled needs Kubernetes 1.37"},
		"hooks on 1.35": {set: []string{"mode=extender", "hookPolicy.enabled=true"}, args: []string{"--kube-version", "1.35"},
			want: "hookPolicy.enabled: true needs Kubernetes 1.36"},
	} {
		args := append([]string{"template", "gpushare", chart}, c.args...)
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		if _, err := helmErr(t, args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s (--set %v): got %v; want an error saying %q", name, c.set, err, c.want)
		}
	}
}

// TestChartHookRoute: GPU memory takes the hook route (the admission
// policies, and gpushare-node without a device per MiB) where the values
// say so, and by default on a new install where the API server serves
// MutatingAdmissionPolicy v1; the policies and the daemon's flag always
// go together.
func TestChartHookRoute(t *testing.T) {
	t.Parallel()
	const mapV1 = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
	for name, c := range map[string]struct {
		args  []string
		hooks bool
	}{
		"auto, no MutatingAdmissionPolicy": {nil, false},
		"auto, Kubernetes 1.36":            {[]string{"--api-versions", mapV1}, true},
		"on":                               {[]string{"--set", "hookPolicy.enabled=true"}, true},
		"off, Kubernetes 1.36":             {[]string{"--api-versions", mapV1, "--set", "hookPolicy.enabled=false"}, false},
	} {
		out := string(helm(t, append([]string{"template", "gpushare", chart}, c.args...)...))
		policy := strings.Contains(out, "\nkind: MutatingAdmissionPolicy\n") && strings.Contains(out, "name: gpushare-gpu-hook\n")
		flag := strings.Contains(out, "- --hook-memory\n")
		if policy != c.hooks || flag != c.hooks {
			t.Errorf("%s: hook policy %v, gpushare-node --hook-memory %v; want both %v", name, policy, flag, c.hooks)
		}
	}
}

// TestChartRender: with every toggle, every component runs as its own
// service account with rules that name their verbs and resources (no
// wildcard, no cluster-admin), every container has requests, probes and
// a security context that grants nothing it does not need, and the node
// daemon mounts just the host paths its mode uses.
func TestChartRender(t *testing.T) {
	t.Parallel()
	for name, set := range chartToggles {
		t.Run(name, func(t *testing.T) {
			objs := render(t, "gpushare-system", set...)
			checkNoCollisions(t, objs)
			var workloads int
			for _, obj := range objs {
				switch o := obj.(type) {
				case *rbacv1.ClusterRole:
					checkRules(t, "ClusterRole "+o.Name, o.Rules)
					if o.Name == "gpushare-scheduler" {
						evicts := slices.ContainsFunc(o.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "pods/eviction") })
						if want := slices.Contains(set, "gpushare.defrag.enabled=true"); evicts != want {
							t.Errorf("ClusterRole gpushare-scheduler may evict pods: %v, want %v (only for defragmentation)", evicts, want)
						}
					}
				case *rbacv1.Role:
					checkRules(t, "Role "+o.Namespace+"/"+o.Name, o.Rules)
				case *rbacv1.ClusterRoleBinding:
					checkBinding(t, o.Name, o.RoleRef, o.Subjects)
				case *rbacv1.RoleBinding:
					checkBinding(t, o.Namespace+"/"+o.Name, o.RoleRef, o.Subjects)
				case *appsv1.Deployment:
					workloads++
					checkPodSpec(t, o.Name, &o.Spec.Template.Spec, set)
					if o.Name == "gpushare-scheduler" {
						env := o.Spec.Template.Spec.Containers[0].Env
						gogc := slices.Contains(env, corev1.EnvVar{Name: "GOGC", Value: "100"})
						if want := slices.Contains(set, "scheduler.env[0].name=GOGC"); gogc != want || !want && len(env) > 0 {
							t.Errorf("gpushare-scheduler's environment %v; want GOGC=100 only where scheduler.env sets it", env)
						}
					}
				case *appsv1.DaemonSet:
					workloads++
					checkPodSpec(t, o.Name, &o.Spec.Template.Spec, set)
				}
			}
			pools := 0
			for _, s := range set {
				if strings.HasPrefix(s, "node.pools[") && strings.Contains(s, "].name=") {
					pools++
				}
			}
			webhook := 0
			if slices.Contains(set, "quota.enabled=true") {
				webhook = 1
			}
			if workloads != 2+pools+webhook {
				t.Errorf("%d Deployments and DaemonSets; want the node daemon, one per node pool (%d), the scheduler or extender, and the quota webhook (%d)",
					workloads, pools, webhook)
			}
			monitors := 0
			if slices.Contains(set, "serviceMonitor.enabled=true") {
				monitors = 2 // the scheduler's and the node daemons'
			}
			args := []string{"template", "gpushare", chart}
			for _, s := range set {
				args = append(args, "--set", s)
			}
			if n := bytes.Count(helm(t, args...), []byte("\nkind: ServiceMonitor\n")); n != monitors {
				t.Errorf("%d ServiceMonitors; want %d", n, monitors)
			}
		})
	}
}

func checkRules(t *testing.T, what string, rules []rbacv1.PolicyRule) {
	t.Helper()
	for _, r := range rules {
		for _, list := range [][]string{r.Verbs, r.Resources, r.APIGroups, r.ResourceNames} {
			if slices.Contains(list, "*") {
				t.Errorf("%s: a wildcard in %+v", what, r)
			}
		}
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("%s: non-resource URLs %v", what, r.NonResourceURLs)
		}
	}
}

func checkBinding(t *testing.T, what string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
	t.Helper()
	allowed := []string{"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"}
	if !strings.HasPrefix(ref.Name, "gpushare-") && !slices.Contains(allowed, ref.Name) {
		t.Errorf("binding %s grants %s %s", what, ref.Kind, ref.Name)
	}
	for _, s := range subjects {
		if s.Kind != rbacv1.ServiceAccountKind || !strings.HasPrefix(s.Name, "gpushare-") {
			t.Errorf("binding %s grants %s %s", what, s.Kind, s.Name)
		}
	}
}

func checkPodSpec(t *testing.T, name string, spec *corev1.PodSpec, set []string) {
	t.Helper()
	// The node daemons of every pool (gpushare-node-<pool>) run as one
	// service account, gpushare-node.
	account := name
	if strings.HasPrefix(name, "gpushare-node-") {
		account = "gpushare-node"
	}
	if spec.ServiceAccountName != account {
		t.Errorf("%s runs as service account %q", name, spec.ServiceAccountName)
	}
	// The extender beside kube-scheduler listens on the host's loopback;
	// nothing else shares a host namespace.
	hostNet := name == "gpushare-extender" && !slices.Contains(set, "extender.beside=false")
	if spec.HostNetwork != hostNet || spec.HostPID || spec.HostIPC {
		t.Errorf("%s: host network %v (want %v), PID %v, IPC %v", name, spec.HostNetwork, hostNet, spec.HostPID, spec.HostIPC)
	}
	// node-pools' pool mps runs with node.mps.
	mps := slices.Contains(set, "node.mps=true") || name == "gpushare-node-mps"
	for _, c := range spec.Containers {
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: container %s lacks CPU and memory requests or a memory limit", name, c.Name)
		}
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			t.Errorf("%s: container %s lacks probes", name, c.Name)
		}
		sc := c.SecurityContext
		if sc == nil || sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: container %s: security context %+v; want unprivileged, no escalation, read-only root, all capabilities dropped", name, c.Name, sc)
			continue
		}
		var wantAdd []corev1.Capability
		if account == "gpushare-node" && c.Name == "gpushare-node" && mps {
			wantAdd = []corev1.Capability{"SYS_ADMIN"}
		}
		if !slices.Equal(sc.Capabilities.Add, wantAdd) {
			t.Errorf("%s: container %s adds capabilities %v; want %v", name, c.Name, sc.Capabilities.Add, wantAdd)
		}
		if account != "gpushare-node" && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) {
			t.Errorf("%s: container %s may run as root", name, c.Name)
		}
	}
	var hostPaths []string
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths = append(hostPaths, v.HostPath.Path)
		}
	}
	var want []string
	if account == "gpushare-node" {
		want = []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources", "/var/run/cdi"}
		if mps {
			want = append(want, "/tmp/nvidia-mps", "/var/log/nvidia-mps", "/run/gpushare/mps-shm")
		}
		if slices.Contains(set, "dra.enabled=true") {
			want = append(want, "/var/lib/kubelet/plugins/gpu.gpushare.io", "/var/lib/kubelet/plugins_registry")
		}
	}
	if !slices.Equal(hostPaths, want) {
		t.Errorf("%s mounts host paths %v; want %v", name, hostPaths, want)
	}
}

// TestChartManifests: deploy/'s RBAC and policies are what the chart
// renders (hack/manifests.sh), so the two never drift.
func TestChartManifests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack/manifests.sh"), dir)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "HELM="+helmBin(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/manifests.sh: %v\n%s", err, out)
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("hack/manifests.sh wrote nothing")
	}
	for _, f := range files {
		want, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, "deploy/"+f.Name()); !bytes.Equal(got, want) {
			t.Errorf("deploy/%s differs from what the chart renders: run `make manifests`", f.Name())
		}
	}
}

// TestChartWorkedConfigs: the worked configurations in deploy/ for
// installs without Helm say what the chart renders for the same choices:
// gpushare-scheduler's profiles (deploy/scheduler-config.yaml: both
// profiles, seed 003's MiB namespace), the extender's GPUShareArgs
// (deploy/extender-config.yaml) and kube-scheduler's extender entry
// (deploy/extender-scheduler-config.yaml, but for its address).
func TestChartWorkedConfigs(t *testing.T) {
	t.Parallel()
	values := []string{"--set-json", seedValues[1]}
	renderData := func(mode, configMap, key string, set ...string) map[string]any {
		t.Helper()
		args := append([]string{"template", "gpushare", chart, "--namespace", "kube-system", "--set", "mode=" + mode}, values...)
		for _, s := range set {
			args = append(args, "--set", s)
		}
		for _, obj := range decodeAll(t, helm(t, args...)) {
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == configMap {
				return yamlMap(t, []byte(cm.Data[key]))
			}
		}
		t.Fatalf("the chart rendered no ConfigMap %s", configMap)
		return nil
	}

	chartScheduler := renderData("scheduler", "gpushare-scheduler-config", "scheduler-config.yaml", "scheduler.replaceDefault=true")
	deployScheduler := yamlMap(t, readFile(t, "deploy/scheduler-config.yaml"))
	if !reflect.DeepEqual(chartScheduler["profiles"], deployScheduler["profiles"]) {
		t.Errorf("deploy/scheduler-config.yaml's profiles differ from the chart's:\ndeploy: %v\nchart:  %v", deployScheduler["profiles"], chartScheduler["profiles"])
	}

	chartArgs := renderData("extender", "gpushare-args", "args.yaml")
	if deployArgs := yamlMap(t, readFile(t, "deploy/extender-config.yaml")); !reflect.DeepEqual(chartArgs, deployArgs) {
		t.Errorf("deploy/extender-config.yaml differs from the chart's GPUShareArgs:\ndeploy: %v\nchart:  %v", deployArgs, chartArgs)
	}

	chartExt := renderData("extender", "gpushare-kube-scheduler-config", "kube-scheduler-config.yaml")
	deployExt := yamlMap(t, readFile(t, "deploy/extender-scheduler-config.yaml"))
	for _, m := range []map[string]any{chartExt, deployExt} {
		exts, _ := m["extenders"].([]any)
		if len(exts) != 1 {
			t.Fatalf("want one extender in %v", m)
		}
		delete(exts[0].(map[string]any), "urlPrefix")
	}
	for _, key := range []string{"profiles", "extenders"} {
		if !reflect.DeepEqual(chartExt[key], deployExt[key]) {
			t.Errorf("deploy/extender-scheduler-config.yaml's %s differ from the chart's:\ndeploy: %v\nchart:  %v", key, deployExt[key], chartExt[key])
		}
	}
}

// strictCodecs refuse a field the kind does not have (server-side apply
// does too).
var strictCodecs = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)

func decodeAll(t *testing.T, out []byte) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := dec.Read()
		if err != nil {
			return objs
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 || bytes.Contains(doc, []byte("kind: ServiceMonitor")) ||
			bytes.Contains(doc, []byte("kind: PrometheusRule")) {
			continue // the Prometheus Operator's kinds, unknown to client-go
		}
		// Kubernetes' decoders keep the last of two equal keys, silently.
		if _, err := yaml.YAMLToJSONStrict(doc); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		obj, _, err := strictCodecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		objs = append(objs, obj)
	}
}

func yamlMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkNoCollisions fails the test if two objects share a kind, namespace
// and name: helm would refuse to install them.
func checkNoCollisions(t *testing.T, objs []runtime.Object) {
	t.Helper()
	seen := map[string]bool{}
	for _, obj := range objs {
		gvks, _, err := scheme.Scheme.ObjectKinds(obj)
		if err != nil {
			t.Fatal(err)
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		key := gvks[0].GroupKind().String() + " " + m.GetNamespace() + "/" + m.GetName()
		if seen[key] {
			t.Errorf("two objects are %s", key)
		}
		seen[key] = true
	}
}

// TestChartNodePools: one release serves GPU nodes whose daemons differ
// (node.pools; here whole GPUs and MPS beside shared GPUs): a DaemonSet
// per pool with the pool's values over node's, each node runs exactly one
// node daemon whatever pool label it carries, no DaemonSet's selector
// takes another's pods, and no two objects share a kind, namespace and
// name.
func TestChartNodePools(t *testing.T) {
	t.Parallel()
	objs := render(t, "gpushare-system", chartToggles["node-pools"]...)
	checkNoCollisions(t, objs)
	daemons := map[string]*appsv1.DaemonSet{}
	for _, obj := range objs {
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			daemons[ds.Name] = ds
		}
	}
	want := []string{"gpushare-node", "gpushare-node-mps", "gpushare-node-whole-card"}
	if got := slices.Sorted(maps.Keys(daemons)); !slices.Equal(got, want) {
		t.Fatalf("DaemonSets %v; want %v", got, want)
	}
	for a, da := range daemons {
		sel, err := metav1.LabelSelectorAsSelector(da.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		for b, db := range daemons {
			if a != b && sel.Matches(labels.Set(db.Spec.Template.Labels)) {
				t.Errorf("DaemonSet %s's selector %s matches the pods of %s", a, sel, b)
			}
		}
		if l := da.Spec.Template.Labels["app.kubernetes.io/component"]; l != "node" {
			t.Errorf("DaemonSet %s's pods: app.kubernetes.io/component %q; want node (the metrics Service selects it)", a, l)
		}
	}
	for _, c := range []struct {
		labels map[string]string
		daemon string
	}{
		{map[string]string{"gpushare": "true"}, "gpushare-node"},
		{map[string]string{"gpushare": "true", "gpushare.io/node-pool": "whole-card"}, "gpushare-node-whole-card"},
		{map[string]string{"gpushare": "true", "gpushare.io/node-pool": "mps"}, "gpushare-node-mps"},
		{map[string]string{"gpushare": "true", "gpushare.io/node-pool": "no-such-pool"}, "gpushare-node"},
		{map[string]string{"gpushare.io/node-pool": "mps"}, ""},
		{nil, ""},
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: c.labels}}
		var on []string
		for name, ds := range daemons {
			pod := &corev1.Pod{Spec: ds.Spec.Template.Spec}
			ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				on = append(on, name)
			}
		}
		if want := []string{c.daemon}; c.daemon == "" && len(on) > 0 || c.daemon != "" && !slices.Equal(on, want) {
			t.Errorf("a node labelled %v runs %v; want %q alone", c.labels, on, c.daemon)
		}
	}
	for name, flags := range map[string][]string{
		"gpushare-node":            {},
		"gpushare-node-whole-card": {"--whole-card"},
		"gpushare-node-mps":        {"--mps"},
	} {
		args := daemons[name].Spec.Template.Spec.Containers[0].Args
		for _, f := range []string{"--whole-card", "--mps"} {
			if slices.Contains(args, f) != slices.Contains(flags, f) {
				t.Errorf("%s runs with %v; want %s only of %v", name, args, flags, []string{"--whole-card", "--mps"})
			}
		}
	}
}

// servedSince is the Kubernetes minor version that first serves each kind
// the chart renders (GA, on by default); a kind the chart renders that is
// missing here fails TestChartVersions until it is added.
var servedSince = map[string]int{
	"/v1, Kind=ConfigMap":                                                    0,
	"/v1, Kind=ResourceQuota":                                                0,
	"/v1, Kind=Secret":                                                       0,
	"/v1, Kind=Service":                                                      0,
	"/v1, Kind=ServiceAccount":                                               0,
	"apps/v1, Kind=DaemonSet":                                                9,
	"apps/v1, Kind=Deployment":                                               9,
	"rbac.authorization.k8s.io/v1, Kind=ClusterRole":                         8,
	"rbac.authorization.k8s.io/v1, Kind=ClusterRoleBinding":                  8,
	"rbac.authorization.k8s.io/v1, Kind=Role":                                8,
	"rbac.authorization.k8s.io/v1, Kind=RoleBinding":                         8,
	"policy/v1, Kind=PodDisruptionBudget":                                    21,
	"admissionregistration.k8s.io/v1, Kind=ValidatingAdmissionPolicy":        30,
	"admissionregistration.k8s.io/v1, Kind=ValidatingAdmissionPolicyBinding": 30,
	"admissionregistration.k8s.io/v1, Kind=MutatingAdmissionPolicy":          36,
	// v1 since 1.16; its matchConditions, which the chart's uses, since 1.30.
	"admissionregistration.k8s.io/v1, Kind=MutatingWebhookConfiguration":   30,
	"resource.k8s.io/v1, Kind=DeviceClass":                                 34,
	"admissionregistration.k8s.io/v1, Kind=MutatingAdmissionPolicyBinding": 36,
}

// TestChartVersions: for Kubernetes 1.33 to 1.38, with every toggle, the
// chart renders only kinds the version serves, even where the API
// versions offered include MutatingAdmissionPolicy v1 (as docs/install.md's
// offline command passes them): the hook route (its policies and
// gpushare-node's --hook-memory) is on by default from 1.36 only and
// refused below when asked for; gpushare-scheduler (kube-scheduler 1.37)
// is refused below 1.37, where the extender renders.
func TestChartVersions(t *testing.T) {
	t.Parallel()
	const mapV1 = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
	for minor := 33; minor <= 38; minor++ {
		version := fmt.Sprintf("1.%d", minor)
		base := []string{"template", "gpushare", chart, "--namespace", "gpushare-system", "--kube-version", version, "--api-versions", mapV1}
		_, err := helmErr(t, base...)
		if want := "mode: scheduler needs Kubernetes 1.37"; minor < 37 && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s, default values: %v; want an error saying %q", version, err, want)
		} else if minor >= 37 && err != nil {
			t.Errorf("%s, default values: %v", version, err)
		}
		for name, set := range chartToggles {
			if minor < 37 {
				set = append(slices.Clone(set), "mode=extender")
			}
			args := slices.Clone(base)
			for _, s := range set {
				args = append(args, "--set", s)
			}
			out, err := helmErr(t, args...)
			askHooks := slices.Contains(set, "hookPolicy.enabled=true")
			if minor < 37 && slices.Contains(set, "dra.enabled=true") {
				if want := "dra.enabled needs Kubernetes 1.37"; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s, %s: %v; want an error saying %q", version, name, err, want)
				}
				continue
			}
			if minor < 37 && slices.Contains(set, "scheduler.replaceDefault=true") {
				if want := "scheduler.replaceDefault: applies to mode scheduler"; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s, %s: %v; want an error saying %q", version, name, err, want)
				}
				continue
			}
			if minor < 37 && slices.Contains(set, "gpushare.defrag.enabled=true") {
				if want := "gpushare.defrag.enabled: needs mode scheduler"; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s, %s: %v; want an error saying %q", version, name, err, want)
				}
				continue
			}
			if minor < 36 && askHooks {
				if want := "hookPolicy.enabled: true needs Kubernetes 1.36"; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s, %s: %v; want an error saying %q", version, name, err, want)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s, %s: %v", version, name, err)
				continue
			}
			for _, obj := range decodeAll(t, out) {
				gvks, _, err := scheme.Scheme.ObjectKinds(obj)
				if err != nil {
					t.Fatal(err)
				}
				since, ok := servedSince[gvks[0].String()]
				if !ok {
					t.Errorf("the chart renders %s: add to servedSince the version that first serves it", gvks[0])
				} else if since > minor {
					m, _ := meta.Accessor(obj)
					t.Errorf("%s, %s: %s %s is served from 1.%d only", version, name, gvks[0].Kind, m.GetName(), since)
				}
			}
			policy := bytes.Contains(out, []byte("\nkind: MutatingAdmissionPolicy\n"))
			flag := bytes.Contains(out, []byte("- --hook-memory\n"))
			if want := minor >= 36; policy != want || flag != want {
				t.Errorf("%s, %s: hook policy %v, gpushare-node --hook-memory %v; want both %v", version, name, policy, flag, want)
			}
		}
	}
}
