package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
		for _, k := range []string{"workload", "policy", "seeds", "unallocated_gpu_pct_at_100", "unallocated_gpu_pct_at_130", "fragmentation_pct_at_90", "decision_us_p50", "decision_us_p99", "unallocated_gpu_pct_bound_at_100"} {
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
		{"--defrag", "--movable", "1.5"}, {"--defrag", "--max-moves", "0"}, {"--max-targets", "-1"}, {"--claims", "--defrag"},
		{"--churn"}, {"--churn", "--claims"}, {"--churn", "--load", "0"}, {"--churn", "--passes", "4"}, {"--spare"}} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), append([]string{"--synthetic-nodes", "5"}, args...), &out, &errs); err == nil {
			t.Errorf("%s: want an error", strings.Join(args, " "))
		}
	}
}

func TestRunChurnJSON(t *testing.T) {
	dir := t.TempDir()
	nodes, pods := filepath.Join(dir, "nodes.csv"), filepath.Join(dir, "pods.csv")
	body := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
	for i := range 40 {
		body += fmt.Sprintf("p%d,1000,1024,1,%d,,LS,Running,%d,%d,%d\n", i, 250+i%3*250, i*10, i*10+300+i%5*200, i*10)
	}
	if err := os.WriteFile(nodes, []byte("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,4,T4\nn1,64000,262144,4,T4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pods, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if err := run(context.Background(), []string{"--nodes", nodes, "--pods", pods, "--churn", "--load", "0.8", "--policy", "fgd-robust", "--seeds", "1", "--json"}, &out, &errs); err != nil {
		t.Fatal(err, errs.String())
	}
	var r map[string]any
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err, out.String())
	}
	for _, k := range []string{"allocated_gpu_pct_time_avg", "gpu_pods_waited_pct", "gpu_pods_turned_away_pct", "wait_s_p99"} {
		if _, ok := r[k]; !ok {
			t.Errorf("churn JSON lacks %q: %s", k, out.String())
		}
	}
	if a, _ := r["allocated_gpu_pct_time_avg"].(float64); a <= 0 || a > 100 {
		t.Errorf("allocated %v%%, want within (0, 100]", r["allocated_gpu_pct_time_avg"])
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
