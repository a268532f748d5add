package main

import (
	"slices"
	"testing"
)

func TestHistogramMeanMs(t *testing.T) {
	exposition := []byte(`# HELP scheduler_scheduling_algorithm_duration_seconds [ALPHA] Scheduling algorithm latency in seconds
# TYPE scheduler_scheduling_algorithm_duration_seconds histogram
scheduler_scheduling_algorithm_duration_seconds_bucket{le="0.001"} 3
scheduler_scheduling_algorithm_duration_seconds_sum 0.05
scheduler_scheduling_algorithm_duration_seconds_count 10
scheduler_scheduling_algorithm_duration_seconds_total_sum 99
gpushare_extender_request_duration_seconds_sum{result="ok",verb="bind"} 40
gpushare_extender_request_duration_seconds_count{result="ok",verb="bind"} 10
gpushare_extender_request_duration_seconds_sum{result="ok",verb="filter"} 0.012
gpushare_extender_request_duration_seconds_count{result="ok",verb="filter"} 4
gpushare_extender_request_duration_seconds_sum{result="too_many",verb="filter"} 0
gpushare_extender_request_duration_seconds_count{result="too_many",verb="filter"} 2
`)
	for _, tc := range []struct {
		name   string
		metric string
		match  []string
		want   float64
		ok     bool
	}{
		{"unlabelled", "scheduler_scheduling_algorithm_duration_seconds", nil, 5, true},
		{"every filter call", "gpushare_extender_request_duration_seconds", []string{`verb="filter"`}, 2, true},
		{"answered filter calls", "gpushare_extender_request_duration_seconds", []string{`verb="filter"`, `result="ok"`}, 3, true},
		{"absent", "scheduler_e2e_scheduling_duration_seconds", nil, 0, false},
		{"no series matches", "gpushare_extender_request_duration_seconds", []string{`verb="prioritize"`}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := histogramMeanMs(exposition, tc.metric, tc.match...)
			if ok != tc.ok || got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Errorf("histogramMeanMs(%s, %q) = %v, %v; want %v, %v", tc.metric, tc.match, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestRoundOrder: every other round runs the modes in reverse, so that
// over two rounds each mode runs as often first as last, and the modes
// given are not reordered in place.
func TestRoundOrder(t *testing.T) {
	modes := []string{"stock", "extender-null", "extender"}
	want := [][]string{
		{"stock", "extender-null", "extender"},
		{"extender", "extender-null", "stock"},
		{"stock", "extender-null", "extender"},
	}
	for round, w := range want {
		if got := roundOrder(modes, round); !slices.Equal(got, w) {
			t.Errorf("round %d: %v, want %v", round, got, w)
		}
	}
	if modes[0] != "stock" || modes[2] != "extender" {
		t.Errorf("roundOrder changed the modes given: %v", modes)
	}
}
