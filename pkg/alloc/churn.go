package alloc

import "math"

// Churn follows the GPU demand a cluster places, releases and turns
// away, over a window of placements that halves every churnHalfLife
// thousandths of a GPU placed: what Spare weighs besides the nodes
// (Room.Turnover, and the demand waiting). The zero value is an empty
// window. It is not safe for concurrent use.
type Churn struct{ placed, released, away float64 }

// churnHalfLife is the GPU demand placed, in thousandths of a GPU, after
// which what the window counted weighs half.
const churnHalfLife = 2000 * 1000

// Place counts milli thousandths of a GPU placed, and ages the window.
func (c *Churn) Place(milli int64) {
	f := math.Exp2(-float64(max(milli, 0)) / churnHalfLife)
	c.placed = c.placed*f + float64(max(milli, 0))
	c.released *= f
	c.away *= f
}

// Release counts milli thousandths of a GPU released.
func (c *Churn) Release(milli int64) { c.released += float64(max(milli, 0)) }

// TurnAway counts milli thousandths of a GPU that found no room and gave
// up waiting (its pod was deleted while pending).
func (c *Churn) TurnAway(milli int64) { c.away += float64(max(milli, 0)) }

// Turnover is the GPU demand released per GPU demand placed in the
// window, 0-1.
func (c *Churn) Turnover() float64 {
	if c.placed <= 0 {
		return 0
	}
	return min(c.released/c.placed, 1)
}

// Away is the GPU demand turned away in the window, in GPUs.
func (c *Churn) Away() float64 { return c.away / 1000 }

// Share is the GPU demand of the pod's app and sidecar containers, in
// thousandths of a GPU, a request by memory weighed against GPUs of
// gpuMemoryMiB (as Spare weighs the mix): what the pod waits for while it
// finds no room. Init containers run before and book nothing of their own.
func (p *PodRequest) Share(gpuMemoryMiB int64) int64 {
	var milli int64
	for i := range p.Containers {
		c := &p.Containers[i]
		if c.Kind == Init {
			continue
		}
		d := c.PerGPU()
		milli += int64(c.GPUCount()) * demandShare(&d, gpuMemoryMiB)
	}
	return milli
}

// Share is what the placement books of n's GPUs, in thousandths of a
// GPU: the share of each GPU it leaves no longer free.
func (p *Placement) Share(n *Node) int64 {
	var milli int64
	for _, b := range p.Booked {
		if b.GPU < 0 || b.GPU >= len(n.GPUs) || n.GPUs[b.GPU].MemoryMiB <= 0 {
			continue // not a GPU of n: it books nothing there
		}
		g := n.GPUs[b.GPU]
		g.Healthy = true // what it books of a GPU that failed since
		milli += 1000 - max(shareOf(&g, b.Usage), 0)
	}
	return milli
}
