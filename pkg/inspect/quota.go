package inspect

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/quota"
	"github.com/gpushare/gpushare/pkg/webhook"
)

// Quota is one namespace's GPU quota (ResourceQuotas on gpushare's
// charged resources) beside what its pods hold of the GPUs.
type Quota struct {
	Namespace string `json:"namespace"`
	// Quotas names the ResourceQuotas that bound the charges.
	Quotas []string `json:"quotas,omitempty"`
	// Memory and Compute are the charged resources' used and hard, the
	// tightest of the namespace's quotas; nil where none bounds it.
	Memory  *Bound `json:"memory,omitempty"`
	Compute *Bound `json:"compute,omitempty"`
	// BookedMemoryMiB and BookedCompute sum what the namespace's pods hold
	// on gpushare's GPUs, by their records.
	BookedMemoryMiB int64 `json:"bookedMemoryMiB"`
	BookedCompute   int64 `json:"bookedCompute"`
	// Uncharged lists the pods that hold GPUs but carry no charge (created
	// before the quota webhook, or past it): the quota does not count
	// them.
	Uncharged []string `json:"uncharged,omitempty"`
	// Unenforced lists the keys of the namespace's ResourceQuotas that
	// name a charged resource but that the API server never enforces
	// ("bare/gpushare.io/quota-memory": only requests.<name> bounds an
	// extended resource).
	Unenforced []string `json:"unenforced,omitempty"`
}

// Bound is a charged resource's use against its hard limit: MiB for
// memory, percent of a GPU for compute.
type Bound struct {
	Used int64 `json:"used"`
	Hard int64 `json:"hard"`
}

// Quotas returns, per namespace with a ResourceQuota on gpushare's
// charges or pods holding GPUs, its quota and what it holds, in
// namespace order. c is the built cluster view; pods are the cluster's
// pods, whose charges say which hold GPUs uncounted.
func Quotas(c *Cluster, quotas []corev1.ResourceQuota, pods []corev1.Pod) []Quota {
	byNS := map[string]*Quota{}
	get := func(ns string) *Quota {
		q := byNS[ns]
		if q == nil {
			q = &Quota{Namespace: ns}
			byNS[ns] = q
		}
		return q
	}
	for i := range quotas {
		rq := &quotas[i]
		mem := bound(rq, quota.MemoryResource, func(v int64) int64 { return v >> 20 })
		cpu := bound(rq, quota.ComputeResource, func(v int64) int64 { return v })
		for _, key := range slices.Sorted(maps.Keys(rq.Spec.Hard)) {
			if name := string(key); name != "requests."+quota.MemoryResource && name != "requests."+quota.ComputeResource &&
				strings.Contains(name, "gpushare.io/quota-") {
				q := get(rq.Namespace)
				q.Unenforced = append(q.Unenforced, rq.Name+"/"+name)
			}
		}
		if mem == nil && cpu == nil {
			continue
		}
		q := get(rq.Namespace)
		q.Quotas = append(q.Quotas, rq.Name)
		q.Memory, q.Compute = tighter(q.Memory, mem), tighter(q.Compute, cpu)
	}
	held := map[string]bool{}
	for _, n := range c.Nodes {
		for _, g := range n.GPUs {
			for pod, u := range podBookings(g.Holders) {
				ns, _, _ := strings.Cut(pod, "/")
				q := get(ns)
				q.BookedMemoryMiB += u.memory
				q.BookedCompute += u.compute
				held[pod] = true
			}
		}
	}
	for i := range pods {
		p := &pods[i]
		if _, charged := webhook.Written(p); held[p.Namespace+"/"+p.Name] && !charged {
			q := get(p.Namespace)
			q.Uncharged = append(q.Uncharged, p.Name)
		}
	}
	out := make([]Quota, 0, len(byNS))
	for _, q := range byNS {
		slices.Sort(q.Uncharged)
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b Quota) int { return cmp.Compare(a.Namespace, b.Namespace) })
	return out
}

type use struct{ memory, compute int64 }

// podBookings returns what each pod holds of one GPU from its
// containers' shares, as the booking adds them: app containers and
// sidecars together, init containers one at a time.
func podBookings(holders []Holder) map[string]use {
	running, init := map[string]use{}, map[string]use{}
	for _, h := range holders {
		if h.Kind == kindName[alloc.Init] {
			i := init[h.Pod]
			init[h.Pod] = use{max(i.memory, h.MemoryMiB), max(i.compute, h.Compute)}
			continue
		}
		r := running[h.Pod]
		running[h.Pod] = use{r.memory + h.MemoryMiB, r.compute + h.Compute}
	}
	for pod, i := range init {
		r := running[pod]
		running[pod] = use{max(r.memory, i.memory), max(r.compute, i.compute)}
	}
	return running
}

// bound reads the hard and used of requests.name from rq, scaled by
// unit; nil if rq does not bound it. The API server bounds an extended
// resource by requests.<name> alone.
func bound(rq *corev1.ResourceQuota, name string, unit func(int64) int64) *Bound {
	key := corev1.ResourceName("requests." + name)
	hard, ok := rq.Spec.Hard[key]
	if !ok {
		return nil
	}
	b := &Bound{Hard: unit(hard.Value())}
	if used, ok := rq.Status.Used[key]; ok {
		b.Used = unit(used.Value())
	}
	return b
}

// over marks a bound used past its hard limit (lowered below what its
// pods already hold: they keep running, and new ones are refused).
func over(b *Bound) string {
	if b.Used > b.Hard {
		return " (over)"
	}
	return ""
}

// tighter is the bound with less room left.
func tighter(a, b *Bound) *Bound {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case b.Hard-b.Used < a.Hard-a.Used:
		return b
	}
	return a
}

// WriteQuotas writes one row per namespace: its GPU memory and compute
// used against hard, what its pods hold on the GPUs, and how many pods
// the quota does not count.
func WriteQuotas(out io.Writer, qs []Quota, u Unit) error {
	w := newTable(out)
	w.row("NAMESPACE", "QUOTA", fmt.Sprintf("MEMORY(%s) USED/HARD", u), "COMPUTE(%) USED/HARD", fmt.Sprintf("BOOKED(%s)", u), "BOOKED COMPUTE(%)", "UNCHARGED PODS")
	for _, q := range qs {
		mem, cpu := "-", "-"
		if q.Memory != nil {
			mem = u.ratio(q.Memory.Used, q.Memory.Hard) + over(q.Memory)
		}
		if q.Compute != nil {
			cpu = strconv.FormatInt(q.Compute.Used, 10) + "/" + strconv.FormatInt(q.Compute.Hard, 10) + over(q.Compute)
		}
		// The names are in -o json and yaml: a namespace from before the
		// webhook may have thousands.
		uncharged := strconv.Itoa(len(q.Uncharged))
		w.row(q.Namespace, orDash(strings.Join(q.Quotas, ",")), mem, cpu, u.Format(q.BookedMemoryMiB), strconv.FormatInt(q.BookedCompute, 10), uncharged)
	}
	if err := w.flush(); err != nil {
		return err
	}
	for _, q := range qs {
		for _, key := range q.Unenforced {
			quotaName, name, _ := strings.Cut(key, "/")
			bare := strings.TrimPrefix(strings.TrimPrefix(name, "limits."), "requests.")
			why := "the API server bounds an extended resource as requests." + bare + " alone"
			if bare != quota.MemoryResource && bare != quota.ComputeResource {
				why = "gpushare charges " + quota.MemoryResource + " and " + quota.ComputeResource + " alone"
			}
			if _, err := fmt.Fprintf(out, "\nResourceQuota %s/%s: %s bounds nothing: %s.\n", q.Namespace, quotaName, name, why); err != nil {
				return err
			}
		}
	}
	return nil
}
