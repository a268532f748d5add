package inspect

import (
	"fmt"
	"io"
	"strings"
	"time"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
)

// WriteDetails writes, per node and per GPU, the model, memory and compute
// booked against the GPU's, the containers holding it with their shares,
// its health, and the node daemon's sampled use next to what is booked.
// now dates the samples.
func WriteDetails(out io.Writer, c *Cluster, u Unit, now time.Time) error {
	for _, n := range c.Nodes {
		if n.Error != "" {
			continue
		}
		fmt.Fprintf(out, "NAME:         %s\nIPADDRESS:    %s\nMODE:         %s\nENFORCEMENT:  %s\nUSAGE:        %s\n\n",
			n.Name, orDash(n.Address), n.Mode, enforcementLine(n.Enforcement), usageLine(n.Usage, now))
		w := newTable(out)
		w.row("GPU", "MODEL / POD (CONTAINER)", "HEALTH", fmt.Sprintf("MEMORY(%s)", u), "COMPUTE(%)", "ENFORCED", fmt.Sprintf("USED(%s)", u), "UTIL", "NOTES")
		for _, g := range n.GPUs {
			used, util := "-", "-"
			if g.Live != nil {
				used, util = u.Format(g.Live.MemoryMiB), fmt.Sprintf("%d%%", g.Live.Utilization)
			}
			health := "Healthy"
			if !g.Healthy {
				health = "Unhealthy"
			}
			w.row(fmt.Sprint(g.Index), g.Model, health, u.ratio(g.BookedMemoryMiB, g.MemoryMiB),
				fmt.Sprintf("%d/%d", g.BookedCompute, g.Compute), "", used, util, strings.Join(g.Notes, "; "))
			for _, h := range g.Holders {
				name := h.Container
				if h.Kind != "App" {
					name += ", " + strings.ToLower(h.Kind)
				}
				w.row("", fmt.Sprintf("  %s (%s)", h.Pod, name), "", u.Format(h.MemoryMiB), fmt.Sprint(h.Compute), orDash(h.Enforced), "", "", "")
			}
		}
		if err := w.flush(); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nAllocated/Total GPU Memory In Node: %s %s (%d%%)\n\n", u.ratio(n.AllocatedMiB, n.TotalMiB), u, percent(n.AllocatedMiB, n.TotalMiB))
	}
	return writeFooter(out, c, u)
}

// enforcementLine says what holds the node's shared containers to their
// shares.
func enforcementLine(e string) string {
	switch gpusharev1.Enforcement(e) {
	case gpusharev1.EnforcementMPS:
		return "mps: every shared container is an MPS client, held to its memory and threads"
	case gpusharev1.EnforcementHAMiCore:
		return "hami-core: HAMi-core holds every shared container to its memory, and slows the kernel launches it intercepts to its compute"
	default:
		return "none: shares are booked, not enforced (MPS clients excepted); each container is trusted to keep to its share"
	}
}

// usageLine says when the node's usage was sampled and whether the
// scheduler still goes by it.
func usageLine(us *Usage, now time.Time) string {
	switch {
	case us == nil:
		return "none published (the node daemon publishes gpushare.io/gpu-usage)"
	case us.Error != "":
		return "unreadable: " + us.Error
	case us.Stale:
		return fmt.Sprintf("stale: sampled %s (%s ago); the scheduler ignores samples older than %s",
			us.Time.Format(time.RFC3339), now.Sub(us.Time).Round(time.Second), gpucache.LiveStaleAfter)
	default:
		return fmt.Sprintf("sampled %s (%s ago)", us.Time.Format(time.RFC3339), now.Sub(us.Time).Round(time.Second))
	}
}
