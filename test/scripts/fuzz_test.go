package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stubGo stands in for go in hack/fuzz.sh: "list" names one package
// whose test file is $TESTFILE, "clean" does nothing, and "test" prints
// its arguments.
const stubGo = `#!/bin/sh
case "$1" in
list) echo "example.com/m/p $TESTFILE" ;;
clean) ;;
test) echo "go $*" ;;
*) echo "unexpected: go $*"; exit 9 ;;
esac
`

// fuzzScript runs hack/fuzz.sh on a package whose test file declares
// target, with FUZZTIME fuzztime and the stand-in go.
func fuzzScript(t *testing.T, fuzztime, target string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	stub := filepath.Join(dir, "go")
	if err := os.WriteFile(stub, []byte(stubGo), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "p_test.go")
	if err := os.WriteFile(file, []byte("package p\n\nfunc "+target+"(f *testing.F) {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("../../hack/fuzz.sh", "./p")
	cmd.Env = append(os.Environ(), "GO="+stub, "TESTFILE="+file, "FUZZTIME="+fuzztime)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestFuzzInputs: with FUZZTIME=inputs each target tries its number of
// inputs from the script's table, not a duration; a duration is passed
// as it is.
func TestFuzzInputs(t *testing.T) {
	for fuzztime, want := range map[string]string{"inputs": "-fuzztime 90000x", "3s": "-fuzztime 3s"} {
		out, err := fuzzScript(t, fuzztime, "FuzzParse")
		if err != nil {
			t.Fatalf("FUZZTIME=%s: %v\n%s", fuzztime, err, out)
		}
		if !strings.Contains(out, "go test -run ^$ -fuzz ^FuzzParse$ "+want+" ") {
			t.Errorf("FUZZTIME=%s: want go test with %s; got:\n%s", fuzztime, want, out)
		}
	}
}

// TestFuzzInputsUnknownTarget: a target the table does not name fails
// FUZZTIME=inputs with what to do, and is not fuzzed.
func TestFuzzInputsUnknownTarget(t *testing.T) {
	out, err := fuzzScript(t, "inputs", "FuzzSomethingNew")
	if err == nil {
		t.Fatalf("a target without a number of inputs passed:\n%s", out)
	}
	if !strings.Contains(out, "FuzzSomethingNew has no number of inputs") || strings.Contains(out, "go test") {
		t.Errorf("want the missing number named and nothing fuzzed; got:\n%s", out)
	}
}
