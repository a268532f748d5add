package inspect

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"strings"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/record"
)

// Input is a snapshot of the cluster.
type Input struct {
	Nodes []corev1.Node
	Pods  []corev1.Pod
	// Leases are the node daemons' leases (gpusharev1.LeaseNamespace),
	// which carry their nodes' live GPU use; the Node's own usage
	// annotation, from daemons before the move, is read too, the newer
	// sample winning. Other leases are ignored.
	Leases []coordinationv1.Lease
	// Claims are the ResourceClaims: those allocated gpushare's DRA
	// devices hold GPUs beside the pods' records.
	Claims []resourceapi.ResourceClaim
	// Now judges the age of usage samples.
	Now time.Time
	// Requests translates a pod's spec into what it asks of GPUs, the
	// measure the scheduler checks records against (resource.Model's
	// PodRequest); nil checks records against their nodes only.
	Requests func(*corev1.Pod) (*alloc.PodRequest, error)
	// RequestAnnotations gives the annotations that shape a pod's request
	// (resource.Model's RequestAnnotations), as the scheduler's cache
	// takes them: a record is judged by the request it was made for.
	RequestAnnotations []string
	// SetLargestGPU, if set, is told the largest GPU's memory once the
	// nodes are read and before any record is checked, as the scheduler
	// tells its resource model (resource.Model's SetLargestGPU).
	SetLargestGPU func(mib int64)
	// Selected is set when Nodes are a selection (a label selector):
	// pods held on other nodes are left out, not reported.
	Selected bool
}

// Build reads the snapshot through the scheduler's cache and returns the
// view of every node that opts in to gpushare, by name.
func Build(in Input) *Cluster {
	l := load(in)
	c, refused, warned, byName, recorded, claimed := l.cache, l.refused, l.warned, l.nodes, l.recorded, l.claimed
	usage := leaseUsage(in.Leases)
	out := &Cluster{Nodes: make([]Node, 0, len(byName))}
	index := make(map[string]int, len(byName))
	for name, n := range byName {
		index[name] = len(out.Nodes)
		out.Nodes = append(out.Nodes, nodeView(c, n, usage[name], in.Now))
	}
	for _, p := range recorded {
		key := p.Namespace + "/" + p.Name
		if err, ok := refused[p.UID]; ok {
			out.Refused = append(out.Refused, Refused{Pod: key, Node: p.Spec.NodeName, Error: err.Error()})
			continue
		}
		placement, _ := c.Holding(p.UID)
		if placement == nil {
			continue
		}
		i, ok := index[placement.Node]
		if !ok || out.Nodes[i].Error != "" {
			err := c.NodeError(placement.Node)
			if err == nil {
				err = fmt.Errorf("node %s is not in gpushare", placement.Node)
			}
			out.Refused = append(out.Refused, Refused{Pod: key, Node: placement.Node, Error: err.Error()})
			continue
		}
		hold(&out.Nodes[i], key, placement, asksMPS(in.Requests, p))
		if err, ok := warned[p.UID]; ok {
			r := Refused{Pod: key, Node: placement.Node, Error: err.Error()}
			if errors.Is(err, record.ErrOverCommitted) {
				out.OverCommitted = append(out.OverCommitted, r)
			} else {
				out.Unconforming = append(out.Unconforming, r)
			}
		}
	}
	for _, rc := range claimed {
		placement, _ := c.Holding(rc.UID)
		if placement == nil {
			continue
		}
		if i, ok := index[placement.Node]; ok && out.Nodes[i].Error == "" {
			holdClaim(&out.Nodes[i], rc, placement)
		}
	}
	listed := map[string]bool{}
	for _, r := range out.OverCommitted {
		listed[r.Pod] = true
	}
	byUID := make(map[types.UID]*corev1.Pod, len(recorded))
	for _, p := range recorded {
		byUID[p.UID] = p
	}
	for _, oc := range c.OverCommitted() {
		// Every claim on the GPU, and every record whose containers there
		// have not run (one the node refuses, having come after the
		// claims), in whichever order this cache booked them: which the
		// node refused is the node's to say (the pod's events).
		name := oc.Namespace + "/" + oc.Pod
		if oc.Claim == "" {
			if p := byUID[oc.PodUID]; p == nil || slices.ContainsFunc(oc.Containers, func(c string) bool { return record.Ran(p, c) }) {
				continue
			}
		} else {
			name = "ResourceClaim " + oc.Claim
			if oc.Pod != "" {
				name += " (pod " + oc.Pod + ")"
			}
		}
		if listed[name] {
			continue
		}
		out.OverCommitted = append(out.OverCommitted, Refused{Pod: name, Node: oc.Node,
			Error: fmt.Sprintf("books GPU %s, whose pods and claims book more than it has: the node refuses whichever came "+
				"after the others: a claim's preparation, or the containers of a pod whose record came after the claims (docs/dra.md, \"A claim the node refuses\")", joinInts(oc.GPUs))})
	}
	sort.Slice(out.OverCommitted, func(i, j int) bool { return out.OverCommitted[i].Pod < out.OverCommitted[j].Pod })
	out.KeptWaiting = keptWaiting(in.Pods)
	for i := range out.Nodes {
		finish(&out.Nodes[i])
		out.AllocatedMiB += out.Nodes[i].AllocatedMiB
		out.TotalMiB += out.Nodes[i].TotalMiB
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Name < out.Nodes[j].Name })
	sort.Slice(out.Refused, func(i, j int) bool { return out.Refused[i].Pod < out.Refused[j].Pod })
	return out
}

// keptWaiting names the pods that wait while idle GPUs are kept for
// whole-GPU pods: unbound, and the scheduler's last word on them
// (PodScheduled) counts nodes that turned them away for it.
func keptWaiting(pods []corev1.Pod) []string {
	var out []string
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, string(alloc.ReasonGPUSpare)) {
				out = append(out, p.Namespace+"/"+p.Name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// leaseUsage returns the usage annotation of each node daemon's lease, by
// node.
func leaseUsage(leases []coordinationv1.Lease) map[string]string {
	out := make(map[string]string)
	for _, l := range leases {
		if l.Namespace != gpusharev1.LeaseNamespace || !strings.HasPrefix(l.Name, gpusharev1.LeasePrefix) {
			continue
		}
		if v, ok := l.Annotations[gpusharev1.UsageAnnotation]; ok {
			out[strings.TrimPrefix(l.Name, gpusharev1.LeasePrefix)] = v
		}
	}
	return out
}

// usageOf returns the newer of the usage samples on the node's lease
// (onLease, empty if none) and on the Node, or the error of the one there
// is when it cannot be read; nil, nil when there is none.
func usageOf(n *corev1.Node, onLease string) (*gpusharev1.GPUUsage, error) {
	var fromLease, fromNode *gpusharev1.GPUUsage
	var errLease, errNode error
	if onLease != "" {
		fromLease, errLease = gpusharev1.ParseUsage(onLease)
	}
	if v, ok := n.Annotations[gpusharev1.UsageAnnotation]; ok {
		fromNode, errNode = gpusharev1.ParseUsage(v)
	}
	switch {
	case fromLease != nil && fromNode != nil:
		if fromNode.Time.After(fromLease.Time.Time) {
			return fromNode, nil
		}
		return fromLease, nil
	case fromLease != nil:
		return fromLease, nil
	case fromNode != nil:
		return fromNode, nil
	case errLease != nil:
		return nil, errLease
	}
	return nil, errNode
}

// loaded is a snapshot read into the scheduler's cache.
type loaded struct {
	cache *gpucache.Cache
	// refused are the records the cache does not book, by pod; warned
	// those it books though they are not what their pods ask.
	refused, warned map[types.UID]error
	// nodes are the nodes that opt in, by name.
	nodes    map[string]*corev1.Node
	recorded []*corev1.Pod
	claimed  []*resourceapi.ResourceClaim
}

// load reads in's nodes, recorded pods and claims into a cache, as the
// scheduler's would hold them.
func load(in Input) *loaded {
	refused, warned := make(map[types.UID]error), make(map[types.UID]error)
	c := gpucache.New(logr.Discard(), gpucache.Options{
		Requests:           in.Requests,
		RequestAnnotations: func(*corev1.Pod) []string { return in.RequestAnnotations },
		Refused: func(pod *corev1.Pod, err error) {
			if errors.Is(err, record.ErrUnconforming) || errors.Is(err, record.ErrRequestEdited) || errors.Is(err, record.ErrOverCommitted) {
				warned[pod.UID] = err
				return
			}
			refused[pod.UID] = err
		},
	})
	byName := make(map[string]*corev1.Node, len(in.Nodes))
	listed := make(map[string]bool, len(in.Nodes))
	for i := range in.Nodes {
		n := &in.Nodes[i]
		listed[n.Name] = true
		if n.Labels[gpusharev1.NodeLabel] != "true" {
			continue
		}
		byName[n.Name] = n
		c.SetNode(n)
	}
	if in.SetLargestGPU != nil {
		in.SetLargestGPU(c.LargestGPU())
	}
	var recorded []*corev1.Pod
	for i := range in.Pods {
		p := &in.Pods[i]
		if !record.Recorded(p) || gpucache.Ended(p) || (in.Selected && !listed[p.Spec.NodeName]) {
			continue
		}
		recorded = append(recorded, p)
		c.SetPod(p)
	}

	var claimed []*resourceapi.ResourceClaim
	for i := range in.Claims {
		rc := &in.Claims[i]
		if node, _, err := claim.Held(rc); err != nil || node == "" || (in.Selected && !listed[node]) {
			continue
		}
		claimed = append(claimed, rc)
		c.SetClaim(rc)
	}
	return &loaded{cache: c, refused: refused, warned: warned, nodes: byName, recorded: recorded, claimed: claimed}
}

// nodeView is the node's inventory and bookings as the cache holds them,
// with its usage sample (onLease is the one its daemon's lease carries).
func nodeView(c *gpucache.Cache, n *corev1.Node, onLease string, now time.Time) Node {
	v := Node{Name: n.Name, Address: address(n), Enforcement: string(gpusharev1.EnforcementNone)}
	if inv, err := gpusharev1.ParseInventory(n.Annotations[gpusharev1.InventoryAnnotation]); err == nil && inv.Enforcement != "" {
		v.Enforcement = string(inv.Enforcement)
	}
	// With what conflicting records hold: an over-committed GPU shows
	// more booked than it has, as the metrics do.
	err := c.ReadBooked(n.Name, func(s *alloc.NodeState) {
		v.Mode = string(gpusharev1.ModeShared)
		if s.Node.Mode == alloc.WholeCard {
			v.Mode = string(gpusharev1.ModeWholeCard)
		}
		for i, g := range s.Node.GPUs {
			v.GPUs = append(v.GPUs, GPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
				Compute: g.ComputeCapacity(), Healthy: g.Healthy,
				BookedMemoryMiB: s.GPUs[i].MemoryMiB, BookedCompute: s.GPUs[i].Compute})
		}
	})
	if err != nil {
		v.Error = err.Error()
		return v
	}
	u, err := usageOf(n, onLease)
	if err != nil {
		v.Usage = &Usage{Error: err.Error()}
		return v
	}
	if u == nil {
		return v
	}
	v.Usage = &Usage{Time: u.Time.UTC(), Stale: now.Sub(u.Time.Time) > gpucache.LiveStaleAfter}
	for _, l := range u.GPUs {
		if l.Index < len(v.GPUs) && v.GPUs[l.Index].Model != gpucache.VanishedModel {
			v.GPUs[l.Index].Live = &Live{MemoryMiB: l.UsedMemoryMiB, Utilization: l.UtilizationPercent}
		}
	}
	return v
}

// address is the node's internal IP, else its first address.
func address(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	if len(n.Status.Addresses) > 0 {
		return n.Status.Addresses[0].Address
	}
	return ""
}

// hold lists each container of a booked placement on the GPUs it holds,
// with what holds it to its share there (mps names the containers that
// ask for MPS).
func hold(n *Node, pod string, p *alloc.Placement, mps map[string]bool) {
	for _, c := range p.Containers {
		shared := slices.ContainsFunc(c.GPUs, func(a alloc.Assignment) bool { return a.Compute < alloc.FullCompute })
		enforced := string(gpusharev1.Enforcement(n.Enforcement).Holds(mps[c.Name], shared))
		if !shared && !mps[c.Name] {
			enforced = "whole"
		}
		for _, a := range c.GPUs {
			if a.GPU < 0 || a.GPU >= len(n.GPUs) {
				continue
			}
			g := &n.GPUs[a.GPU]
			g.Holders = append(g.Holders, Holder{Pod: pod, Container: c.Name, Kind: kindName[c.Kind],
				MemoryMiB: a.MemoryMiB, Compute: a.Compute, Enforced: enforced})
		}
	}
}

// asksMPS returns the containers of pod that ask for GPUs under MPS, by
// name, as requests reads it (nil if it is nil or cannot).
func asksMPS(requests func(*corev1.Pod) (*alloc.PodRequest, error), pod *corev1.Pod) map[string]bool {
	if requests == nil {
		return nil
	}
	req, err := requests(pod)
	if err != nil || req == nil {
		return nil
	}
	out := map[string]bool{}
	for _, c := range req.Containers {
		out[c.Name] = c.MPS
	}
	return out
}

// holdClaim lists claim rc as a holder of the GPUs its placement books:
// under the pod it is reserved for ("<claim>" when none), container
// "claim/<name>", kind Claim.
func holdClaim(n *Node, rc *resourceapi.ResourceClaim, p *alloc.Placement) {
	holder := rc.Namespace + "/<claim>"
	for _, r := range rc.Status.ReservedFor {
		if r.Resource == "pods" {
			holder = rc.Namespace + "/" + r.Name
			break
		}
	}
	for _, a := range p.Booked {
		if a.GPU < 0 || a.GPU >= len(n.GPUs) {
			continue
		}
		g := &n.GPUs[a.GPU]
		g.Holders = append(g.Holders, Holder{Pod: holder, Container: "claim/" + rc.Name, Kind: "Claim",
			MemoryMiB: a.MemoryMiB, Compute: a.Compute, Enforced: claimEnforced(rc)})
	}
}

// finish sorts holders, sums the node and notes what needs a look.
func finish(n *Node) {
	for i := range n.GPUs {
		g := &n.GPUs[i]
		sort.SliceStable(g.Holders, func(a, b int) bool { return g.Holders[a].Pod < g.Holders[b].Pod })
		n.AllocatedMiB += g.BookedMemoryMiB
		if g.Model == gpucache.VanishedModel {
			g.Notes = append(g.Notes, "vanished from the inventory")
		} else {
			n.TotalMiB += g.MemoryMiB
		}
		if !g.Healthy {
			g.Notes = append(g.Notes, "unhealthy")
		}
		if g.Live != nil && g.Live.MemoryMiB > g.BookedMemoryMiB && len(g.Holders) > 0 {
			g.Notes = append(g.Notes, fmt.Sprintf("uses more than booked (%d > %d MiB)", g.Live.MemoryMiB, g.BookedMemoryMiB))
		}
		if g.Live != nil && n.Usage.Stale {
			g.Notes = append(g.Notes, "usage stale")
		}
	}
}

// claimEnforced says what holds claim rc to its share: MPS for a claim
// of the MPS class, whose prepared containers are MPS clients; none
// otherwise, as gpushare-dra prepares claims.
func claimEnforced(rc *resourceapi.ResourceClaim) string {
	for _, r := range rc.Spec.Devices.Requests {
		if r.Exactly != nil && r.Exactly.DeviceClassName == claim.MPSClass {
			return string(gpusharev1.EnforcementMPS)
		}
	}
	return string(gpusharev1.EnforcementNone)
}
