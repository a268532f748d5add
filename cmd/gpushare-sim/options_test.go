package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSeeds(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    []uint64
		wantErr bool
	}{
		"range":    {in: "42-44", want: []uint64{42, 43, 44}},
		"list":     {in: "1, 5,9", want: []uint64{1, 5, 9}},
		"reversed": {in: "9-1", wantErr: true},
		"garbage":  {in: "a,b", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseSeeds(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}

func TestRunJSON(t *testing.T) {
	var out, errs bytes.Buffer
	err := run(context.Background(), []string{"--synthetic-nodes", "20", "--policy", "binpack,random", "--seeds", "1-2", "--json"}, &out, &errs)
	if err != nil {
		t.Fatal(err, errs.String())
	}
	dec := json.NewDecoder(&out)
	for _, want := range []string{"binpack", "random"} {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"workload", "policy", "seeds", "unallocated_gpu_pct_at_100", "unallocated_gpu_pct_at_130", "fragmentation_pct_at_90", "decision_us_p50", "decision_us_p99"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%s: JSON lacks %q", want, k)
			}
		}
		if r["policy"] != want {
			t.Errorf("policy = %v, want %s", r["policy"], want)
		}
	}
}

func TestRunBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--policy", "nope"}, {"--nodes", "x.csv"}, {"--seeds", "z"}, {"extra"},
		{"--defrag", "--movable", "1.5"}, {"--defrag", "--max-moves", "0"}, {"--max-targets", "-1"}, {"--claims", "--defrag"}} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), append([]string{"--synthetic-nodes", "5"}, args...), &out, &errs); err == nil {
			t.Errorf("%s: want an error", strings.Join(args, " "))
		}
	}
}

func TestRunVersion(t *testing.T) {
	var out, errs bytes.Buffer
	// --version wins over arguments that would otherwise be refused.
	if err := run(context.Background(), []string{"--version", "--seeds", "x", "extra"}, &out, &errs); err != nil {
		t.Fatalf("run --version: %v (stderr %q)", err, errs.String())
	}
	if got := out.String(); !strings.HasPrefix(got, "gpushare-sim ") {
		t.Errorf("run --version printed %q, want gpushare-sim and its version", got)
	}
}
