package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestChartAdoptsDeploy: an operator installed gpushare without Helm as
// install.md's section 4 says (deploy/'s RBAC and policies, the rest
// rendered once and applied with kubectl), then follows its "Moving a
// deploy/ install to Helm" steps, as written: the release takes every
// object over (the admission policies carry its name), and uninstalling
// it leaves none of them behind, the DRA objects included.
func TestChartAdoptsDeploy(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	// The commands write gpushare.yaml where they run: a directory of
	// the test's with the repository's deploy/ and charts/.
	dir := t.TempDir()
	for _, d := range []string{"deploy", "charts"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	sh := newDocShell(t, c)
	sh.dir = dir
	steps := docSteps(t, "docs/install.md", "## 4. Install without Helm")
	if len(steps[0]) < 4 || len(steps[1]) != 1 || len(steps[2]) != 1 {
		t.Fatalf("section 4's commands: %v; want the install without Helm, then the two steps", steps)
	}
	for _, cmd := range steps[0] {
		sh.run(t, cmd)
	}
	ctx := context.Background()
	policies := []string{"gpushare-allocation", "gpushare-node"}
	for _, name := range policies {
		if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("after the install without Helm: %v", err)
		}
	}

	sh.run(t, steps[1][0])
	out := sh.output(t, steps[2][0])
	for _, name := range policies {
		p, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rel := p.Annotations["meta.helm.sh/release-name"]; rel != "gpushare" {
			t.Errorf("policy %s is owned by release %q, want gpushare", name, rel)
		}
		if !strings.Contains(out, "\n"+name+" ") || !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
			return slices.Equal(strings.Fields(l), []string{name, "gpushare"})
		}) {
			t.Errorf("step 2 does not show %s owned by gpushare:\n%s", name, out)
		}
	}

	sh.run(t, "helm uninstall gpushare --namespace kube-system --wait")
	for _, name := range policies {
		if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("policy %s after helm uninstall: %v, want it gone", name, err)
		}
	}
	// Nothing of deploy/ is left: the DRA objects included.
	checkNothingLeft(t, c, client)
}
