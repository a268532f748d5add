package inspect

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/decision"
)

// PodInput is one pod with what is known about it.
type PodInput struct {
	Pod *corev1.Pod
	// Events are the pod's events, in any order.
	Events []corev1.Event
	// Request is what the pod asks of GPUs (nil if unknown), RequestErr
	// why it could not be read.
	Request    *alloc.PodRequest
	RequestErr error
	// Nodes are the cluster's nodes, whose labels and taints say which
	// of them the pod may land on: Closest names only those. Nil names
	// any node.
	Nodes []corev1.Node
	// Group is the PodGroup the pod names in spec.schedulingGroup, nil
	// if it names none or it could not be read; GroupErr says why not
	// (apierrors.IsNotFound: it does not exist).
	Group    *schedulingv1beta1.PodGroup
	GroupErr error
}

// PodView is where a pod's containers landed, or why it waits.
type PodView struct {
	Pod       string `json:"pod"`
	Node      string `json:"node,omitempty"`
	Phase     string `json:"phase"`
	Scheduler string `json:"schedulerName"`
	// Asks is what each GPU container asks for.
	Asks []string `json:"asks,omitempty"`
	// Landed lists each container's share of each GPU it holds.
	Landed []Landing `json:"landed,omitempty"`
	// Refused says why gpushare books nothing for the pod's record.
	Refused string `json:"refused,omitempty"`
	// Unconforming says why the pod's record, which gpushare books, is
	// not what the pod asks.
	Unconforming string `json:"unconforming,omitempty"`
	// OverCommitted says why the pod's record, which gpushare holds,
	// does not fit its GPUs beside the others.
	OverCommitted string `json:"overCommitted,omitempty"`
	// Reason is the scheduler's word while the pod waits: its
	// PodScheduled condition and latest FailedScheduling event.
	Reason  string    `json:"reason,omitempty"`
	Event   string    `json:"event,omitempty"`
	Closest []Closest `json:"closest,omitempty"`
	// Gang says what the PodGroup the pod names asks of it.
	Gang string `json:"gang,omitempty"`
	// asksGPUs is set when the pod's request names GPUs.
	asksGPUs bool
}

// Landing is one container's share of one GPU, beside the GPU's state.
type Landing struct {
	Container    string `json:"container"`
	Kind         string `json:"kind"`
	GPU          int    `json:"gpu"`
	Model        string `json:"model"`
	MemoryMiB    int64  `json:"memoryMiB"`
	Compute      int64  `json:"compute"`
	GPUBookedMiB int64  `json:"gpuBookedMiB"`
	GPUMemoryMiB int64  `json:"gpuMemoryMiB"`
	OtherPods    int    `json:"otherPods"`
}

// Closest is a node by how much room it has for a GPU pod.
type Closest struct {
	Node string `json:"node"`
	// FreeMiB is the largest free memory on one healthy GPU, FreeGPUs
	// the healthy GPUs with nothing booked.
	FreeMiB  int64 `json:"freeMiB"`
	FreeGPUs int   `json:"freeGPUs"`
}

// closestNodes is how many nodes the pod view lists for a pending pod.
const closestNodes = 3

// BuildPod describes one pod against the cluster's view.
func BuildPod(c *Cluster, in PodInput) *PodView {
	p := in.Pod
	key := p.Namespace + "/" + p.Name
	v := &PodView{Pod: key, Node: p.Spec.NodeName, Phase: string(p.Status.Phase), Scheduler: p.Spec.SchedulerName}
	v.Gang = gangOf(p, in.Group, in.GroupErr)
	switch {
	case in.RequestErr != nil:
		v.Asks = []string{"unreadable: " + in.RequestErr.Error()}
	case in.Request != nil:
		v.asksGPUs = in.Request.GPUs()
		for _, r := range in.Request.Containers {
			v.Asks = append(v.Asks, asks(r))
		}
	}
	for _, r := range c.Refused {
		if r.Pod == key {
			v.Refused = r.Error
		}
	}
	for _, r := range c.Unconforming {
		if r.Pod == key {
			v.Unconforming = r.Error
		}
	}
	for _, r := range c.OverCommitted {
		if r.Pod == key {
			v.OverCommitted = r.Error
		}
	}
	for _, n := range c.Nodes {
		for _, g := range n.GPUs {
			others := map[string]bool{}
			for _, h := range g.Holders {
				if h.Pod != key {
					others[h.Pod] = true
				}
			}
			for _, h := range g.Holders {
				if h.Pod == key {
					v.Landed = append(v.Landed, Landing{Container: h.Container, Kind: h.Kind, GPU: g.Index, Model: g.Model,
						MemoryMiB: h.MemoryMiB, Compute: h.Compute, GPUBookedMiB: g.BookedMemoryMiB, GPUMemoryMiB: g.MemoryMiB, OtherPods: len(others)})
				}
			}
		}
	}
	order := containerOrder(p)
	sort.SliceStable(v.Landed, func(i, j int) bool { return order[v.Landed[i].Container] < order[v.Landed[j].Container] })
	if p.Spec.NodeName == "" {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				v.Reason = cond.Message
			}
		}
		v.Event = latest(in.Events, "FailedScheduling")
		v.Closest = closest(c, eligible(p, in.Nodes))
	}
	return v
}

// asks renders a container's request: "server: 20480 MiB, 30% of 1 GPU".
func asks(r alloc.PodContainer) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): ", r.Name, r.Kind)
	switch {
	case r.Exclusive:
		fmt.Fprintf(&b, "%d whole GPU(s)", max(r.Count, 1))
	case r.MemoryPercent > 0:
		fmt.Fprintf(&b, "%d%% of the memory, %d%% compute on each of %d GPU(s)", r.MemoryPercent, r.Compute, max(r.Count, 1))
	default:
		fmt.Fprintf(&b, "%d MiB, %d%% compute on each of %d GPU(s)", r.PerGPU().MemoryMiB, r.PerGPU().Compute, max(r.Count, 1))
	}
	if len(r.Models) > 0 {
		fmt.Fprintf(&b, ", models %s", strings.Join(r.Models, ", "))
	}
	if r.Filter != nil {
		fmt.Fprintf(&b, ", GPUs by %s", r.Filter)
	}
	return b.String()
}

// containerOrder numbers the pod's containers in the order they start.
func containerOrder(p *corev1.Pod) map[string]int {
	order := map[string]int{}
	for _, c := range p.Spec.InitContainers {
		order[c.Name] = len(order)
	}
	for _, c := range p.Spec.Containers {
		order[c.Name] = len(order)
	}
	return order
}

// latest returns the message of the newest event of reason.
func latest(events []corev1.Event, reason string) string {
	var msg string
	var at int64
	for _, e := range events {
		if e.Reason != reason {
			continue
		}
		t := e.LastTimestamp.Unix()
		if !e.EventTime.IsZero() && e.EventTime.Unix() > t {
			t = e.EventTime.Unix()
		}
		if e.Series != nil && e.Series.LastObservedTime.Unix() > t {
			t = e.Series.LastObservedTime.Unix()
		}
		if msg == "" || t >= at {
			msg, at = e.Message, t
		}
	}
	return msg
}

// eligible returns the nodes pod may land on by its required node
// affinity (nodeSelector included) and its tolerations of the nodes'
// NoSchedule and NoExecute taints; nil when nodes is nil.
func eligible(pod *corev1.Pod, nodes []corev1.Node) map[string]bool {
	if nodes == nil {
		return nil
	}
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	out := make(map[string]bool, len(nodes))
	for i := range nodes {
		if decision.EligibleBy(affinity, pod, &nodes[i]) {
			out[nodes[i].Name] = true
		}
	}
	return out
}

// closest ranks the nodes the pod may land on (allowed; nil allows any)
// by the largest free memory on one healthy GPU, then by their idle GPUs:
// the scheduler's message counts nodes by reason but names none.
func closest(c *Cluster, allowed map[string]bool) []Closest {
	var out []Closest
	for _, n := range c.Nodes {
		if n.Error != "" || (allowed != nil && !allowed[n.Name]) {
			continue
		}
		cl := Closest{Node: n.Name}
		for _, g := range n.GPUs {
			if !g.Healthy {
				continue
			}
			cl.FreeMiB = max(cl.FreeMiB, g.MemoryMiB-g.BookedMemoryMiB)
			if g.BookedMemoryMiB == 0 && g.BookedCompute == 0 {
				cl.FreeGPUs++
			}
		}
		out = append(out, cl)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].FreeMiB != out[j].FreeMiB {
			return out[i].FreeMiB > out[j].FreeMiB
		}
		return out[i].FreeGPUs > out[j].FreeGPUs
	})
	return out[:min(len(out), closestNodes)]
}

// WritePod writes the pod view.
func WritePod(out io.Writer, v *PodView, u Unit) error {
	fmt.Fprintf(out, "Pod:        %s\nScheduler:  %s\nPhase:      %s\nNode:       %s\n", v.Pod, orDash(v.Scheduler), orDash(v.Phase), orDash(v.Node))
	claims := slices.ContainsFunc(v.Landed, func(l Landing) bool { return l.Kind == "Claim" })
	switch {
	case len(v.Asks) == 0 && claims:
		fmt.Fprintln(out, "Asks:       GPUs through ResourceClaims of gpushare's DeviceClasses (below: what they hold)")
	case len(v.Asks) == 0:
		fmt.Fprintln(out, "Asks:       no GPU; gpushare leaves the pod to kube-scheduler's own plugins")
	}
	for i, a := range v.Asks {
		label := "Asks:"
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(out, "%-11s %s\n", label, a)
	}
	if v.Refused != "" {
		fmt.Fprintf(out, "Record:     refused, gpushare books nothing for it: %s\n", v.Refused)
	}
	if v.Unconforming != "" {
		fmt.Fprintf(out, "Record:     not what the pod asks; %s\n", v.Unconforming)
	}
	if v.OverCommitted != "" {
		fmt.Fprintf(out, "Record:     over-commits its GPUs, held full; %s\n", v.OverCommitted)
	}
	if v.Node != "" && v.Refused == "" && len(v.Landed) == 0 && v.asksGPUs {
		fmt.Fprintf(out, "Record:     none: the pod holds no GPU. It was bound to %s without gpushare (spec.nodeName set directly, or another scheduler), "+
			"so gpushare books nothing for it and gpushare-node gives its containers no GPU; recreate it without spec.nodeName\n", v.Node)
	}
	if len(v.Landed) > 0 {
		from := "its " + gpusharev1.AllocationAnnotation + " record"
		if claims {
			from = "its ResourceClaims' allocations"
		}
		fmt.Fprintf(out, "\nWhere each container landed (from %s, as the scheduler books it):\n", from)
		w := newTable(out)
		w.row("CONTAINER", "KIND", "GPU", "MODEL", fmt.Sprintf("MEMORY(%s)", u), "COMPUTE(%)", fmt.Sprintf("GPU BOOKED/TOTAL(%s)", u), "SHARED WITH")
		for _, l := range v.Landed {
			w.row(l.Container, l.Kind, fmt.Sprint(l.GPU), l.Model, u.Format(l.MemoryMiB), fmt.Sprint(l.Compute),
				u.ratio(l.GPUBookedMiB, l.GPUMemoryMiB), fmt.Sprintf("%d other pod(s)", l.OtherPods))
		}
		if err := w.flush(); err != nil {
			return err
		}
		fmt.Fprintln(out, "Why these GPUs: the node's and GPUs' policy ranked them first among those with room (see docs/design.md, Policies).")
	}
	if v.Node != "" {
		return nil
	}
	fmt.Fprintln(out)
	if v.Gang != "" {
		fmt.Fprintf(out, "Gang:       %s\n", v.Gang)
	}
	if v.Reason == "" && v.Event == "" && v.Gang == "" {
		fmt.Fprintln(out, "Waiting:    no scheduling attempt has failed yet")
	}
	if v.Reason != "" {
		fmt.Fprintf(out, "Waiting:    %s\n", v.Reason)
	}
	if v.Event != "" && v.Event != v.Reason {
		fmt.Fprintf(out, "Last event: %s\n", v.Event)
	}
	if len(v.Closest) > 0 {
		fmt.Fprintf(out, "\nThe scheduler's message names no nodes. Closest by free memory on one healthy GPU:\n")
		w := newTable(out)
		w.row("NODE", fmt.Sprintf("LARGEST FREE(%s)", u), "IDLE GPUS")
		for _, cl := range v.Closest {
			w.row(cl.Node, u.Format(cl.FreeMiB), fmt.Sprint(cl.FreeGPUs))
		}
		return w.flush()
	}
	return nil
}

// gangOf says what the PodGroup p names asks of it, "" if it names none.
func gangOf(p *corev1.Pod, g *schedulingv1beta1.PodGroup, err error) string {
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return ""
	}
	name := p.Namespace + "/" + *p.Spec.SchedulingGroup.PodGroupName
	switch {
	case apierrors.IsNotFound(err):
		return "names PodGroup " + name + ", which does not exist: kube-scheduler tries none of its pods until it does"
	case err != nil || g == nil:
		return fmt.Sprintf("member of PodGroup %s, which cannot be read (%v)", name, err)
	case g.Spec.SchedulingPolicy.Gang != nil:
		return fmt.Sprintf("member of PodGroup %s, placed only with %d of its pods at once; kubectl inspect gpushare gangs says whether they fit",
			name, g.Spec.SchedulingPolicy.Gang.MinCount)
	}
	return "member of PodGroup " + name + ", placed pod by pod"
}
