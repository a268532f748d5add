package sim

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot draws allocated against arrived GPU (% of capacity, mean over seeds)
// for each result into a PNG (or any format gonum/plot infers from the
// file name).
func Plot(path string, results []*Result) error {
	p := plot.New()
	p.Title.Text = "GPU allocated as pods arrive"
	if len(results) > 0 {
		p.Title.Text += " (" + results[0].Workload + ")"
	}
	p.X.Label.Text = "arrived GPU (% of capacity)"
	p.Y.Label.Text = "allocated GPU (% of capacity)"
	p.Legend.Top = true
	p.Legend.Left = true
	var lines []any
	for _, r := range results {
		pts := make(plotter.XYs, len(r.Curve))
		for i, c := range r.Curve {
			pts[i] = plotter.XY{X: c.Arrived, Y: c.Allocated}
		}
		lines = append(lines, fmt.Sprintf("%s (%.2f%% unallocated at 100%%)", r.Policy, r.Unalloc100), pts)
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
