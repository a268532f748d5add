package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	configv1 "github.com/gpushare/gpushare/apis/config/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/decision"
	"github.com/gpushare/gpushare/pkg/inspect"
	"github.com/gpushare/gpushare/pkg/resource"
	"github.com/gpushare/gpushare/pkg/version"
	"github.com/gpushare/gpushare/pkg/workload"
)

// InspectOptions are the plugin's flags and what Complete derives.
type InspectOptions struct {
	ConfigFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	// Clock dates usage samples.
	Clock clock.PassiveClock

	Output   string
	Unit     string
	Details  bool
	Selector string
	// Config is a GPUShareArgs file: its resource model is the measure
	// records are checked against, as the scheduler checks them.
	Config string

	// MaxMoves bounds each plan of `defrag`.
	MaxMoves int

	// pod is the pod NAME of `pod NAME`, empty for the cluster views;
	// defrag, quota and gangs are set for those views.
	pod       string
	defrag    bool
	quota     bool
	gangs     bool
	args      *configv1.GPUShareArgs
	namespace string
	unit      inspect.Unit
	client    kubernetes.Interface
}

// NewInspectOptions returns the defaults: the GiB table.
func NewInspectOptions(streams genericiooptions.IOStreams) *InspectOptions {
	return &InspectOptions{ConfigFlags: genericclioptions.NewConfigFlags(true), IOStreams: streams,
		Clock: clock.RealClock{}, Unit: string(inspect.GiB), MaxMoves: 3}
}

// NewCmd returns the command `kubectl inspect gpushare`.
func NewCmd(streams genericiooptions.IOStreams) *cobra.Command {
	o := NewInspectOptions(streams)
	cmd := &cobra.Command{
		Use:         "kubectl-inspect-gpushare [pod NAME | defrag | quota | gangs]",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl inspect gpushare"},
		Short:       "Show how much of each GPU gpushare has booked, and by whom",
		Long: `Show how much of each GPU gpushare has booked, read from the pods'
gpushare.io/allocation records and the nodes' GPU inventories the way the
scheduler reads them. With "pod NAME", show where the pod's containers
landed or why it waits. With "defrag", show for each pod that waits for
GPUs which running pods would move to make room for it (a dry run:
nothing moves). With "quota", show each namespace's GPU quota (the
ResourceQuotas on gpushare.io/quota-memory and quota-compute) used and
hard, beside what its pods hold of the GPUs and the pods it does not
count. With "gangs", show each PodGroup with a gang policy (1.37's
Workload API): its pods, how many are bound, kube-scheduler's state, and
for one that waits whether the pods it needs fit the GPUs now, would fit
were every GPU free, or never can.`,
		Example: `  kubectl inspect gpushare
  kubectl inspect gpushare -d --unit MiB
  kubectl inspect gpushare -l pool=h100 -o wide
  kubectl inspect gpushare pod -n team-mib gpu-test-mem-0
  kubectl inspect gpushare defrag --max-moves 2
  kubectl inspect gpushare quota
  kubectl inspect gpushare gangs`,
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := o.Complete(o.ConfigFlags, args)
			if err == nil {
				err = o.Validate()
			}
			if err == nil {
				err = o.Run(cmd.Context())
			}
			if err != nil {
				fmt.Fprintln(o.ErrOut, "error:", err)
			}
			return err
		},
	}
	o.ConfigFlags.AddFlags(cmd.Flags())
	// Defined here so that -v stays free, as in kubectl.
	cmd.Flags().Bool("version", false, "Print the version and exit.")
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "Output format: wide, json or yaml.")
	cmd.Flags().StringVar(&o.Unit, "unit", o.Unit, "Unit of GPU memory: GiB or MiB.")
	cmd.Flags().BoolVarP(&o.Details, "details", "d", false, "Show each GPU: its model, bookings, the containers holding it, health and sampled use.")
	cmd.Flags().StringVar(&o.Config, "config", "", "The scheduler's GPUShareArgs file (apiVersion config.gpushare.io/v1alpha1): check each record against its pod's spec by that resource model, as the scheduler does. Without it records are checked against their nodes only.")
	cmd.Flags().StringVarP(&o.Selector, "selector", "l", "", "Label selector of the nodes to show (e.g. pool=h100).")
	cmd.Flags().IntVar(&o.MaxMoves, "max-moves", o.MaxMoves, "With defrag: the most pods one plan moves.")
	return cmd
}

// Complete reads the arguments and makes the client.
func (o *InspectOptions) Complete(getter genericclioptions.RESTClientGetter, args []string) error {
	switch {
	case len(args) == 0:
	case len(args) == 2 && args[0] == "pod":
		o.pod = args[1]
	case len(args) == 1 && args[0] == "defrag":
		o.defrag = true
	case len(args) == 1 && args[0] == "quota":
		o.quota = true
	case len(args) == 1 && args[0] == "gangs":
		o.gangs = true
	default:
		return fmt.Errorf("unexpected arguments %q: want none, \"pod NAME\", \"defrag\", \"quota\" or \"gangs\"", args)
	}
	unit, err := inspect.ParseUnit(o.Unit)
	if err != nil {
		return err
	}
	o.unit = unit
	if o.namespace, _, err = getter.ToRawKubeConfigLoader().Namespace(); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// Protobuf halves the cost of decoding tens of thousands of pods.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = 50, 100
	if o.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return nil
}

// Validate checks the flags' combinations.
func (o *InspectOptions) Validate() error {
	switch o.Output {
	case "", "wide", "json", "yaml":
	default:
		return fmt.Errorf("unknown output format %q: want wide, json or yaml", o.Output)
	}
	if o.Details && o.Output != "" {
		return errors.New("-d and -o are exclusive: -o json and yaml hold the details")
	}
	if o.defrag && o.MaxMoves < 1 {
		return fmt.Errorf("--max-moves %d: want at least 1", o.MaxMoves)
	}
	if o.defrag && (o.Details || o.Output == "wide" || o.Selector != "") {
		return errors.New("defrag takes -o json or yaml only, and no -d or -l: it plans over the whole cluster")
	}
	if o.quota && (o.Details || o.Output == "wide" || o.Selector != "") {
		return errors.New("quota takes -o json or yaml only, and no -d or -l: it sums over the whole cluster")
	}
	if o.gangs && (o.Details || o.Output == "wide" || o.Selector != "") {
		return errors.New("gangs takes -o json or yaml only, and no -d or -l: it places over the whole cluster")
	}
	return nil
}

// Run lists the cluster and writes the chosen view.
func (o *InspectOptions) Run(ctx context.Context) error {
	model, checked, err := o.model(ctx)
	if err != nil {
		return err
	}
	snap, err := list(ctx, o.client, o.Selector)
	if err != nil {
		return err
	}
	now := o.Clock.Now()
	in := inspect.Input{Nodes: snap.nodes, Pods: snap.pods, Leases: snap.leases, Claims: snap.claims, Now: now, SetLargestGPU: model.SetLargestGPU,
		Selected: o.Selector != ""}
	if checked {
		in.Requests, in.RequestAnnotations = model.PodRequest, model.RequestAnnotations()
	}
	if o.defrag {
		return o.runDefrag(ctx, in, snap, model)
	}
	if o.gangs {
		return o.runGangs(ctx, in, snap, model)
	}
	c := inspect.Build(in)
	if o.quota {
		return o.runQuota(ctx, c, snap.pods)
	}
	if o.pod != "" {
		return o.runPod(ctx, c, model, snap.nodes)
	}
	switch {
	case o.Output == "json" || o.Output == "yaml":
		return o.encode(c)
	case o.Details:
		return inspect.WriteDetails(o.Out, c, o.unit, now)
	default:
		return inspect.WriteTable(o.Out, c, inspect.TableOptions{Unit: o.unit, Wide: o.Output == "wide"})
	}
}

// model returns the resource model the cluster runs, and whether records
// are checked by it: --config's (a GPUShareArgs file, or
// gpushare-scheduler's KubeSchedulerConfiguration), else the one in the
// cluster's gpushare args ConfigMap (the chart's). Where neither is found
// (or may not be read) it is the default model, which the pod view uses
// to show what a pod asks, and a note says so.
func (o *InspectOptions) model(ctx context.Context) (*resource.Model, bool, error) {
	if o.Config != "" {
		raw, err := os.ReadFile(o.Config)
		if err != nil {
			return nil, false, fmt.Errorf("reading --config: %w", err)
		}
		args, err := configv1.LoadArgsFrom(raw)
		if err != nil {
			return nil, false, fmt.Errorf("--config %s: %w", o.Config, err)
		}
		o.args = args
		m, err := resource.New(args.ResourceModel)
		return m, true, err
	}
	args, from, err := clusterArgs(ctx, o.client)
	if err != nil {
		return nil, false, err
	}
	if args == nil {
		fmt.Fprintf(o.ErrOut, "note: %s; reading pods by the default resource model (pass --config)\n", from)
		m, err := resource.New(nil)
		return m, false, err
	}
	o.args = args
	m, err := resource.New(args.ResourceModel)
	return m, true, err
}

// runDefrag plans, for each pod that waits for GPUs, the moves that would
// make room for it, by the cluster's policy (learned from the bound pods,
// as the scheduler learns it when it starts).
// policy returns the cluster's placement policy (--config's, else the
// defaults) having seen the bound pods, as the scheduler's has, and its
// seed.
func (o *InspectOptions) policy(snap *snapshot, model *resource.Model) (*workload.Policy, uint64, error) {
	args := o.args
	if args == nil {
		args = &configv1.GPUShareArgs{}
		configv1.SetArgsDefaults(args)
	}
	policy, err := decision.Policy(args, model)
	if err != nil {
		return nil, 0, err
	}
	for i := range snap.pods {
		p := &snap.pods[i]
		if p.Spec.NodeName == "" {
			continue
		}
		if req, err := model.PodRequest(p); err == nil {
			policy.Observe(string(p.UID), req)
		}
	}
	return policy, args.Seed, nil
}

// runGangs writes each gang and gpushare's reading of it.
func (o *InspectOptions) runGangs(ctx context.Context, in inspect.Input, snap *snapshot, model *resource.Model) error {
	groups, err := o.client.SchedulingV1beta1().PodGroups(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return errors.New("the cluster does not serve PodGroups (scheduling.k8s.io/v1beta1): gangs need the API server's GenericWorkload gate and --runtime-config=scheduling.k8s.io/v1beta1=true")
	}
	if err != nil {
		return fmt.Errorf("listing PodGroups: %w", err)
	}
	policy, seed, err := o.policy(snap, model)
	if err != nil {
		return err
	}
	in.Requests, in.RequestAnnotations = model.PodRequest, model.RequestAnnotations()
	gangs, err := inspect.BuildGangs(inspect.GangInput{Input: in, Groups: groups.Items, Placer: policy.Placer(), Seed: seed})
	if err != nil {
		return err
	}
	if o.Output == "json" || o.Output == "yaml" {
		return o.encode(gangs)
	}
	return inspect.WriteGangs(o.Out, gangs)
}

func (o *InspectOptions) runDefrag(ctx context.Context, in inspect.Input, snap *snapshot, model *resource.Model) error {
	policy, seed, err := o.policy(snap, model)
	if err != nil {
		return err
	}
	namespaces, pdbs, err := listDefrag(ctx, o.client)
	if err != nil {
		return err
	}
	in.Requests, in.RequestAnnotations = model.PodRequest, model.RequestAnnotations()
	d, err := inspect.BuildDefrag(inspect.DefragInput{Input: in, Namespaces: namespaces, PDBs: pdbs, Placer: policy.Placer(),
		Budget: alloc.DefragBudget{MaxMoves: o.MaxMoves, MaxTargets: 64}, Seed: seed})
	if err != nil {
		return err
	}
	if o.Output == "json" || o.Output == "yaml" {
		return o.encode(d)
	}
	return inspect.WriteDefrag(o.Out, d, o.unit)
}

func (o *InspectOptions) runPod(ctx context.Context, c *inspect.Cluster, model *resource.Model, nodes []corev1.Node) error {
	pod, events, err := getPod(ctx, o.client, o.namespace, o.pod)
	if err != nil {
		return err
	}
	req, reqErr := model.PodRequest(pod)
	in := inspect.PodInput{Pod: pod, Events: events, Request: req, RequestErr: reqErr, Nodes: nodes}
	if sg := pod.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
		in.Group, in.GroupErr = o.client.SchedulingV1beta1().PodGroups(pod.Namespace).Get(ctx, *sg.PodGroupName, metav1.GetOptions{})
	}
	v := inspect.BuildPod(c, in)
	if o.Output == "json" || o.Output == "yaml" {
		return o.encode(v)
	}
	return inspect.WritePod(o.Out, v, o.unit)
}

func (o *InspectOptions) encode(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if o.Output == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	}
	_, err = fmt.Fprintf(o.Out, "%s\n", b)
	return err
}

// runQuota writes each namespace's GPU quota beside what it holds.
func (o *InspectOptions) runQuota(ctx context.Context, c *inspect.Cluster, pods []corev1.Pod) error {
	quotas, err := o.client.CoreV1().ResourceQuotas(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ResourceQuotas: %w", err)
	}
	qs := inspect.Quotas(c, quotas.Items, pods)
	if o.Output == "json" || o.Output == "yaml" {
		return o.encode(qs)
	}
	return inspect.WriteQuotas(o.Out, qs, o.unit)
}
