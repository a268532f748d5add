package v1alpha1

import (
	"strings"
	"testing"
	"time"
)

func TestLoadArgsDefrag(t *testing.T) {
	a, err := LoadArgs(nil)
	if err != nil || a.DefragOn() || a.Defrag != nil {
		t.Fatalf("defaults: %+v, %v; want defragmentation off", a.Defrag, err)
	}
	a, err = LoadArgs([]byte("defrag: {enabled: true}"))
	if err != nil {
		t.Fatal(err)
	}
	if d := a.Defrag; !a.DefragOn() || d.MaxMoves != 3 || d.MaxTargets != 64 || d.PlansPerMinute != 6 || d.Timeout.Duration != 2*time.Minute {
		t.Errorf("defaults when enabled: %+v", d)
	}
	a, err = LoadArgs([]byte("defrag: {enabled: true, maxMoves: 5, timeout: 90s}"))
	if err != nil || a.Defrag.MaxMoves != 5 || a.Defrag.Timeout.Duration != 90*time.Second {
		t.Errorf("set fields: %+v, %v", a.Defrag, err)
	}
	_, err = LoadArgs([]byte("defrag: {enabled: true, maxMoves: 21, maxTargets: -1, plansPerMinute: -2, timeout: 1s}"))
	for _, want := range []string{
		"defrag.maxMoves: Invalid value: 21: must be 1 to 20",
		"defrag.maxTargets: Invalid value: -1: must be at least 1",
		"defrag.plansPerMinute: Invalid value: -2: must be at least 1",
		`defrag.timeout: Invalid value: "1s": must be 10s to 1h`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid fields: %v; want %q", err, want)
		}
	}
	if _, err := LoadArgs([]byte("defrag: {enabled: true, moves: 2}")); err == nil || !strings.Contains(err.Error(), `unknown field "defrag.moves"`) {
		t.Errorf("an unknown field: %v", err)
	}
}
