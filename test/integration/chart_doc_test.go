package integration

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// TestChartDocCommands: every shell block of install.md is valid bash,
// and every helm install, upgrade or template command in it, pasted as it
// is ($REGISTRY and $VERSION set), renders the chart for Kubernetes 1.37
// and sets only values the chart has: a mistyped --set key, which Helm
// would take silently, fails here. (Sections 4 and 7 and the Check
// command are also run on a real control plane, by TestChartAdoptsDeploy,
// TestChartMigrationFromAliyun and TestChartInstall.)
func TestChartDocCommands(t *testing.T) {
	t.Parallel()
	var values map[string]any
	if err := yaml.Unmarshal(readFile(t, chart+"/values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(helmBin(t), filepath.Join(bin, "helm")); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home,
		"REGISTRY=registry.example", "VERSION=v1.2.3")
	blocks, helms := shellBlocks(string(readFile(t, "docs/install.md")))
	if len(helms) < 8 {
		t.Fatalf("found %d helm commands in install.md, want the install, upgrade, template and migration ones", len(helms))
	}
	for _, b := range blocks {
		sh := exec.Command("bash", "-n")
		sh.Stdin = strings.NewReader(b)
		if out, err := sh.CombinedOutput(); err != nil {
			t.Errorf("not valid bash: %v\n%s\n%s", err, out, b)
		}
	}
	for _, cmd := range helms {
		fields := strings.Fields(cmd)
		for i := 0; i < len(fields)-1; i++ {
			switch fields[i] {
			case "--set", "--set-json", "--set-string":
				key, _, _ := strings.Cut(strings.Trim(fields[i+1], `'"`), "=")
				if !hasValue(values, key) {
					t.Errorf("%s: the chart has no value %s", cmd, key)
				}
			}
		}
		// As helm template: the chart rendered with those flags, for the
		// version the docs target.
		flags := strings.Join(fields[4:], " ") // after "helm VERB gpushare charts/gpushare"
		for _, f := range []string{"--reuse-values", "--take-ownership", "--force-conflicts"} {
			flags = strings.ReplaceAll(flags, f, "")
		}
		render := "helm template gpushare charts/gpushare " + flags
		if !strings.Contains(render, "--kube-version") {
			render += " --kube-version 1.37 --api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
		}
		render, _, _ = strings.Cut(render, ">")
		sh := exec.Command("bash", "-c", "set -eo pipefail\n"+render)
		sh.Dir, sh.Env = root, env
		var stderr strings.Builder
		sh.Stderr = &stderr
		out, err := sh.Output()
		if err != nil {
			t.Errorf("%s: rendering it (%s): %v\n%s", cmd, render, err, stderr.String())
			continue
		}
		checkDocNodeSelector(t, cmd, out)
	}
}

// checkDocNodeSelector: a command that sets node.nodeSelector with
// --set-json runs gpushare-node on exactly the labels it names (a key set
// to null drops the chart's default one): Helm merges a map it is given
// with the default, and a DaemonSet that also asks the default label never
// starts on the nodes the doc labels.
func checkDocNodeSelector(t *testing.T, cmd string, rendered []byte) {
	t.Helper()
	_, rest, ok := strings.Cut(cmd, "--set-json 'node.nodeSelector=")
	if !ok {
		return
	}
	value, _, _ := strings.Cut(rest, "'")
	var given map[string]*string
	if err := json.Unmarshal([]byte(value), &given); err != nil {
		t.Errorf("%s: node.nodeSelector %s: %v", cmd, value, err)
		return
	}
	want := map[string]string{}
	for k, v := range given {
		if v != nil {
			want[k] = *v
		}
	}
	for _, obj := range decodeAll(t, rendered) {
		if d, ok := obj.(*appsv1.DaemonSet); ok && d.Name == "gpushare-node" {
			if got := d.Spec.Template.Spec.NodeSelector; !maps.Equal(got, want) {
				t.Errorf("%s: gpushare-node runs on nodes labelled %v; want exactly %v", cmd, got, want)
			}
			return
		}
	}
	t.Errorf("%s: renders no gpushare-node DaemonSet", cmd)
}

// shellBlocks returns the page's sh blocks, and its helm install, upgrade
// and template commands with their continuation lines joined.
func shellBlocks(page string) (blocks, helms []string) {
	var block strings.Builder
	in, cmd := false, ""
	for line := range strings.Lines(page) {
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && trimmed == "```sh":
			in = true
			block.Reset()
		case in && trimmed == "```":
			in = false
			blocks = append(blocks, block.String())
		case in:
			block.WriteString(strings.TrimLeft(line, " "))
			if c, more := strings.CutSuffix(trimmed, `\`); more {
				cmd += c
				continue
			}
			cmd += trimmed
			if f := strings.Fields(cmd); len(f) > 4 && f[0] == "helm" && (f[1] == "install" || f[1] == "upgrade" || f[1] == "template") {
				helms = append(helms, cmd)
			}
			cmd = ""
		}
	}
	return blocks, helms
}

// hasValue reports whether values has the dotted key: each step a map key,
// or the path ends inside a list or a free-form map (one the chart's
// values leave empty, e.g. node.nodeSelector's keys).
func hasValue(values map[string]any, key string) bool {
	var v any = values
	for _, part := range strings.Split(key, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return v != nil
		}
		next, ok := m[part]
		if !ok {
			return len(m) == 0
		}
		v = next
	}
	return true
}
