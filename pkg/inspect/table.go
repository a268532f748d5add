package inspect

import (
	"fmt"
	"io"
	"strings"

	"github.com/gpushare/gpushare/pkg/alloc"
)

// TableOptions say how the cluster table looks.
type TableOptions struct {
	Unit Unit
	// Wide adds each node's mode, GPU models and pod count.
	Wide bool
}

// WriteTable writes one row per GPU node, one column per GPU
// (GPUi(Allocated/Total)), the node's total, and the cluster's total and
// share allocated: the table of Aliyun's kubectl-inspect-gpushare, with
// GPUs of different sizes shown as they are.
func WriteTable(out io.Writer, c *Cluster, o TableOptions) error {
	w := newTable(out)
	width := 0
	for _, n := range c.Nodes {
		width = max(width, len(n.GPUs))
	}
	head := []string{"NAME", "IPADDRESS"}
	for i := range width {
		head = append(head, fmt.Sprintf("GPU%d(Allocated/Total)", i))
	}
	head = append(head, fmt.Sprintf("GPU Memory(%s)", o.Unit))
	if o.Wide {
		head = append(head, "MODE", "MODELS", "PODS")
	}
	w.row(head...)
	marked := false
	for _, n := range c.Nodes {
		if n.Error != "" {
			continue
		}
		cells := []string{n.Name, orDash(n.Address)}
		for i := range width {
			if i >= len(n.GPUs) {
				cells = append(cells, "-")
				continue
			}
			g := n.GPUs[i]
			cell := o.Unit.ratio(g.BookedMemoryMiB, g.MemoryMiB)
			if !g.Healthy {
				cell += "*"
				marked = true
			}
			cells = append(cells, cell)
		}
		cells = append(cells, o.Unit.ratio(n.AllocatedMiB, n.TotalMiB))
		if o.Wide {
			cells = append(cells, n.Mode, models(n), fmt.Sprint(pods(n)))
		}
		w.row(cells...)
	}
	if err := w.flush(); err != nil {
		return err
	}
	if marked {
		fmt.Fprintln(out, "* unhealthy GPU, or held full by an over-commit (see -d)")
	}
	return writeFooter(out, c, o.Unit)
}

// writeFooter writes the cluster's totals, the nodes left out and the
// records refused.
func writeFooter(out io.Writer, c *Cluster, u Unit) error {
	fmt.Fprintln(out, strings.Repeat("-", 79))
	fmt.Fprintf(out, "Allocated/Total GPU Memory In Cluster:\n%s (%d%%)\n", u.ratio(c.AllocatedMiB, c.TotalMiB), percent(c.AllocatedMiB, c.TotalMiB))
	var left []Node
	for _, n := range c.Nodes {
		if n.Error != "" {
			left = append(left, n)
		}
	}
	if len(left) > 0 {
		fmt.Fprintln(out, "\nNodes left out:")
		for _, n := range left {
			fmt.Fprintf(out, "  %s: %s\n", n.Name, n.Error)
		}
	}
	if len(c.KeptWaiting) > 0 {
		fmt.Fprintf(out, "\nPods waiting while idle GPUs are kept for the whole-GPU pods expected (%s, workload.keepIdleGPUs; "+
			"kubectl inspect gpushare pod NAME says what each waits for):\n", alloc.ReasonGPUSpare)
		const shown = 10
		for _, p := range c.KeptWaiting[:min(len(c.KeptWaiting), shown)] {
			fmt.Fprintf(out, "  %s\n", p)
		}
		if len(c.KeptWaiting) > shown {
			fmt.Fprintf(out, "  and %d more\n", len(c.KeptWaiting)-shown)
		}
	}
	if len(c.Refused) > 0 {
		fmt.Fprintln(out, "\nRecords gpushare books nothing for:")
		for _, r := range c.Refused {
			fmt.Fprintf(out, "  %s (node %s): %s\n", r.Pod, orDash(r.Node), r.Error)
		}
	}
	if len(c.Unconforming) > 0 {
		fmt.Fprintln(out, "\nRecords gpushare books as they stand, though not what their pods ask:")
		for _, r := range c.Unconforming {
			fmt.Fprintf(out, "  %s (node %s): %s\n", r.Pod, orDash(r.Node), r.Error)
		}
	}
	if len(c.OverCommitted) > 0 {
		fmt.Fprintln(out, "\nRecords that over-commit their GPUs (gpushare holds those GPUs full until a pod goes):")
		for _, r := range c.OverCommitted {
			fmt.Fprintf(out, "  %s (node %s): %s\n", r.Pod, orDash(r.Node), r.Error)
		}
	}
	return nil
}

// models lists the node's GPU models with counts, in GPU order:
// "8x NVIDIA H200" or "1x Tesla T4, 1x NVIDIA L4".
func models(n Node) string {
	var order []string
	count := map[string]int{}
	for _, g := range n.GPUs {
		if count[g.Model] == 0 {
			order = append(order, g.Model)
		}
		count[g.Model]++
	}
	parts := make([]string, len(order))
	for i, m := range order {
		parts[i] = fmt.Sprintf("%dx %s", count[m], m)
	}
	return strings.Join(parts, ", ")
}

// pods counts the pods holding any GPU of the node.
func pods(n Node) int {
	seen := map[string]bool{}
	for _, g := range n.GPUs {
		for _, h := range g.Holders {
			seen[h.Pod] = true
		}
	}
	return len(seen)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
