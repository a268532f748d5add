package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/sim"
	"github.com/gpushare/gpushare/pkg/trace"
	"github.com/gpushare/gpushare/pkg/version"
	"github.com/gpushare/gpushare/pkg/workload"
)

// Defaults of the built-in synthetic workload.
const (
	defaultNodes        = 300
	defaultWorkloadSeed = 2023
)

type options struct {
	nodes, pods string
	policies    []string
	seeds       []uint64
	json        bool
	plot        string
	synthNodes  int
	parallel    int
	cpuProfile  string
	version     bool
	source      string
	halfLife    int64
	defrag      bool
	spare       bool
	claims      bool
	movable     float64
	maxMoves    int
	maxTargets  int
	churn       bool
	load        float64
	passes      int
}

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("gpushare-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	policies := fs.String("policy", "random,bestfit,binpack,spread,fgd,fgd-pack,fgd-fill,fgd-robust", "comma-separated policies; NAME, or NODE/GPU for different node- and GPU-level policies (known: "+strings.Join(alloc.NodePolicies(), ", ")+")")
	seeds := fs.String("seeds", "42-51", "seeds: a range A-B or a comma-separated list")
	fs.StringVar(&o.nodes, "nodes", "", "node list CSV (openb format); empty: the built-in synthetic cluster")
	fs.StringVar(&o.pods, "pods", "", "pod list CSV (openb format); empty: the built-in synthetic workload")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per policy instead of a table")
	fs.StringVar(&o.plot, "plot", "", "write a PNG of allocated vs arrived GPU for each policy to this file")
	fs.IntVar(&o.parallel, "parallel", 0, "seeds replayed at once; 0 means one per CPU (use 1 for clean decision times)")
	fs.StringVar(&o.cpuProfile, "cpu-profile", "", "write a CPU profile of the whole run to this file")
	fs.IntVar(&o.synthNodes, "synthetic-nodes", defaultNodes, "nodes in the built-in synthetic cluster")
	fs.StringVar(&o.source, "workload", sim.Oracle, "where fragmentation-aware policies get the pod shapes they weigh: oracle (the trace's own mix) or online (learned from the pods as they arrive, as the scheduler does)")
	fs.Int64Var(&o.halfLife, "half-life", workload.DefaultHalfLife, "with --workload online: pods after which an observed pod weighs half")
	fs.BoolVar(&o.defrag, "defrag", false, "when a pod fits no node, move the fewest movable pods that make room for it (docs/benchmarks.md, \"Defragmentation\")")
	fs.Float64Var(&o.movable, "movable", 0.3, "with --defrag: the share of GPU pods that may move, drawn per pod from the seed")
	fs.IntVar(&o.maxMoves, "max-moves", 3, "with --defrag: the most pods one plan moves")
	fs.IntVar(&o.maxTargets, "max-targets", 64, "with --defrag: the most nodes tried as a waiting pod's node, those with the least movable GPU memory first; 0 for all")
	fs.BoolVar(&o.claims, "claims", false, "place each pod as gpushare-scheduler places a ResourceClaim of gpushare's devices: the node by the policy, the GPUs the first that fit, as Kubernetes' DRA allocator gives them (docs/dra.md)")
	fs.BoolVar(&o.churn, "churn", false, "replay with churn: the pods arrive in the trace's creation order, pass after pass, and leave after their trace lifetimes; report the GPUs allocated over time and the pods that waited or were turned away (docs/benchmarks.md, \"Churn\")")
	fs.Float64Var(&o.load, "load", 1, "with --churn: the offered GPU load, in fractions of the cluster's GPUs")
	fs.IntVar(&o.passes, "passes", 12, "with --churn: passes over the trace's pods; the first 4 warm the cluster up and are not measured")
	fs.BoolVar(&o.spare, "spare", false, "with --workload online: keep idle GPUs spare for pods that ask whole GPUs while the learned mix expects more whole-GPU demand than the idle GPUs can take; a pod asking part of a GPU then waits, or is turned away, rather than break one (docs/benchmarks.md, \"Spare idle GPUs\")")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gpushare-sim [--nodes FILE --pods FILE] [--policy NAME[,NAME]] [--seeds 42-51] [--json] [--plot curve.png]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.version {
		return o, nil
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if (o.nodes == "") != (o.pods == "") {
		return nil, errors.New("--nodes and --pods go together")
	}
	if o.parallel < 0 {
		return nil, errors.New("--parallel must not be negative")
	}
	if o.source != sim.Oracle && o.source != sim.Online {
		return nil, fmt.Errorf("--workload %q: want %s or %s", o.source, sim.Oracle, sim.Online)
	}
	if o.spare && o.source != sim.Online {
		return nil, fmt.Errorf("--spare weighs the mix it learns: it needs --workload %s", sim.Online)
	}
	if o.halfLife <= 0 {
		return nil, errors.New("--half-life must be positive")
	}
	if o.synthNodes <= 0 {
		return nil, errors.New("--synthetic-nodes must be positive")
	}
	if o.movable < 0 || o.movable > 1 {
		return nil, fmt.Errorf("--movable %v: want a share from 0 to 1", o.movable)
	}
	if o.claims && o.defrag {
		return nil, errors.New("--claims and --defrag do not go together: claims are not moved")
	}
	if o.churn && o.claims {
		return nil, errors.New("--churn and --claims do not go together")
	}
	if o.churn && (o.load <= 0 || o.passes <= 4) {
		return nil, errors.New("--churn needs a positive --load and more than 4 --passes")
	}
	if o.maxMoves < 1 || o.maxTargets < 0 {
		return nil, errors.New("--max-moves must be at least 1 and --max-targets not negative")
	}
	for p := range strings.SplitSeq(*policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.policies = append(o.policies, p)
		}
	}
	if len(o.policies) == 0 {
		return nil, errors.New("--policy is empty")
	}
	var err error
	if o.seeds, err = parseSeeds(*seeds); err != nil {
		return nil, err
	}
	return o, nil
}

// parseSeeds reads "42-51" or "1,2,3".
func parseSeeds(s string) ([]uint64, error) {
	if a, b, ok := strings.Cut(s, "-"); ok {
		lo, err1 := strconv.ParseUint(a, 10, 64)
		hi, err2 := strconv.ParseUint(b, 10, 64)
		if err1 != nil || err2 != nil || hi < lo || hi-lo > 10_000 {
			return nil, fmt.Errorf("--seeds %q: want A-B with A <= B", s)
		}
		var out []uint64
		for v := lo; v <= hi; v++ {
			out = append(out, v)
		}
		return out, nil
	}
	var out []uint64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds %q: %q is not a number", s, f)
		}
		out = append(out, v)
	}
	return out, nil
}

func (o *options) workload() (*sim.Workload, error) {
	if o.nodes == "" {
		nodes, pods := trace.Synthetic(defaultWorkloadSeed, o.synthNodes)
		return &sim.Workload{Name: "synthetic", Nodes: nodes, Pods: pods}, nil
	}
	nodes, err := trace.ReadNodesFile(o.nodes)
	if err != nil {
		return nil, err
	}
	pods, err := trace.ReadPodsFile(o.pods)
	if err != nil {
		return nil, err
	}
	return &sim.Workload{Name: workloadName(o.pods), Nodes: nodes, Pods: pods}, nil
}

// workloadName turns ".../openb_pod_list_gpushare40.csv" into "gpushare40".
func workloadName(path string) string {
	base := path[strings.LastIndex(path, "/")+1:]
	base = strings.TrimSuffix(base, ".csv")
	return strings.TrimPrefix(base, "openb_pod_list_")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if o.version {
		fmt.Fprintln(stdout, version.Line("gpushare-sim"))
		return nil
	}
	w, err := o.workload()
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		stopProfile, err := startProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	fmt.Fprintf(stderr, "workload %s: %d nodes, %d GPUs, %d pods; %d seed(s)\n", w.Name, len(w.Nodes), w.Capacity()/1000, len(w.Pods), len(o.seeds))
	if o.churn {
		return runChurn(ctx, o, w, stdout, stderr)
	}
	var results []*sim.Result
	for _, p := range o.policies {
		start := time.Now()
		var defrag *sim.Defrag
		if o.defrag {
			defrag = &sim.Defrag{Movable: o.movable, Budget: alloc.DefragBudget{MaxMoves: o.maxMoves, MaxTargets: o.maxTargets}}
		}
		r, err := sim.Run(ctx, w, p, o.seeds, sim.Options{Parallel: o.parallel, Workload: o.source, Defrag: defrag, Claims: o.claims,
			Learn: workload.Config{HalfLife: o.halfLife, Spare: o.spare}, Progress: func(done, total int) {
				fmt.Fprintf(stderr, "\r%-10s seed %d/%d  %s", p, done, total, time.Since(start).Round(time.Second))
			}})
		fmt.Fprintln(stderr)
		if err != nil {
			return fmt.Errorf("policy %s: %w", p, err)
		}
		results = append(results, r)
		if o.json {
			if err := json.NewEncoder(stdout).Encode(r); err != nil {
				return err
			}
		}
	}
	if !o.json {
		printTable(stdout, results, o.defrag)
	}
	if o.plot != "" {
		if err := sim.Plot(o.plot, results); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "wrote", o.plot)
	}
	return nil
}

func printTable(w io.Writer, results []*sim.Result, defrag bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "WORKLOAD\tPOLICY\tUNALLOC@100%\tBOUND@100%\tUNALLOC@130%\tFRAG@90%\tDECISION p50\tp99\t"
	if defrag {
		head += "MOVED/20 PLACED\tPLANS\tPLAN p99\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%.2f%%\t%.2f%%\t%.2f%%\t%.2f%%\t%.0fµs\t%.0fµs\t",
			r.Workload, r.Policy, r.Unalloc100, r.Bound100, r.Unalloc130, r.Frag90, r.DecisionP50us, r.DecisionP99us)
		if defrag {
			fmt.Fprintf(tw, "%.2f\t%d\t%.1fms\t", 20*r.MovedPerPlaced100, r.Plans100, r.PlanP99ms)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// runChurn replays each policy with churn (sim.Churn).
func runChurn(ctx context.Context, o *options, w *sim.Workload, stdout, stderr io.Writer) error {
	var results []*sim.ChurnResult
	for _, p := range o.policies {
		start := time.Now()
		var defrag *sim.Defrag
		if o.defrag {
			defrag = &sim.Defrag{Movable: o.movable, Budget: alloc.DefragBudget{MaxMoves: o.maxMoves, MaxTargets: o.maxTargets}}
		}
		r, err := sim.Churn(ctx, w, p, o.seeds, sim.ChurnOptions{Load: o.load, Passes: o.passes, Workload: o.source, Defrag: defrag,
			Parallel: o.parallel, Learn: workload.Config{HalfLife: o.halfLife, Spare: o.spare}})
		fmt.Fprintf(stderr, "%-10s churn %s\n", p, time.Since(start).Round(time.Second))
		if err != nil {
			return fmt.Errorf("policy %s: %w", p, err)
		}
		results = append(results, r)
		if o.json {
			if err := json.NewEncoder(stdout).Encode(r); err != nil {
				return err
			}
		}
	}
	if o.json {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "WORKLOAD\tPOLICY\tDEFRAG\tLOAD\tALLOCATED\tWAITED\tTURNED AWAY\tGPU TURNED AWAY\tWAIT p50\tp99\tMOVED/20 PLACED\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%.2f\t%.2f%%\t%.2f%%\t%.2f%%\t%.2f%%\t%.0fs\t%.0fs\t%.3f\t\n", r.Workload, r.Policy, r.Defrag, r.Load,
			r.Allocated, r.Waited, r.TurnedAway, r.TurnedAwayGPUs, r.WaitP50s, r.WaitP99s, r.MovedPer20)
	}
	return tw.Flush()
}

// startProfile starts a CPU profile into path; call the result to stop it.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
