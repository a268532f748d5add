package v1alpha1

import (
	"strings"
	"testing"
)

// A value its own decoder refuses (a duration, a quantity) is named by
// its path, which that decoder's error leaves out; a value of the wrong
// JSON type keeps the decoder's own error, which names the field.
func TestLoadNamesRefusedValues(t *testing.T) {
	for data, want := range map[string]string{
		"workload: {keepIdleFor: banana}":                                  `workload.keepIdleFor: time: invalid duration "banana"`,
		"defrag: {enabled: true, timeout: soon}":                           `defrag.timeout: time: invalid duration "soon"`,
		"workload: {shapes: [{weight: 1, requests: {cpu: 2x}}]}":           `workload.shapes[0].requests[cpu]: `,
		"workload: {shapes: [{weight: 1}, {weight: 2, requests: {a: b}}]}": `workload.shapes[1].requests[a]: `,
		"workload: {learn: maybe}":                                         `Go struct field WorkloadArgs.workload.learn of type bool`,
		"workload: {keepIdleFor: 5}":                                       `workload.keepIdleFor: json: cannot unmarshal number`,
		// A miscased key is not the field it resembles: the value refused is
		// the one under the exact name.
		"defrag: {Timeout: banana}\nworkload: {keepIdleFor: soon}": `workload.keepIdleFor: time: invalid duration "soon"`,
	} {
		_, err := LoadArgs([]byte(data))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadArgs(%s) error = %v; want one containing %q", data, err, want)
		}
	}
	// A type error names its field already: no path is put before it.
	if _, err := LoadArgs([]byte("workload: {KeepIdleFor: banana, learn: maybe}")); err == nil || strings.Contains(err.Error(), "GPUShareArgs: workload") {
		t.Errorf("a miscased field beside a type error: %v; want the type error alone", err)
	}
	if _, err := LoadArgs([]byte("workload: {keepIdleFor: 90s}")); err != nil {
		t.Errorf("keepIdleFor: 90s: %v", err)
	}
	// The resource model decodes the same way.
	_, err := Load([]byte("apiVersion: config.gpushare.io/v1alpha1\nkind: ResourceModel\nresources: [{name: a.io/m, kind: Memory, unit: parsecs}]\n"))
	if err == nil {
		t.Error("a unit of parsecs accepted")
	}
}
