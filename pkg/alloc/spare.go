package alloc

import "math"

// Spare keeps idle GPUs spare for pods that ask whole GPUs.
//
// A pod asking part of a GPU that no partly used GPU fits breaks an idle
// one. While a cluster fills, idle GPUs run short first: each one a
// share of 0.81 took is then missing to a pod of one whole GPU, which is
// turned away instead. Spare counts the idle GPUs whole-GPU pods could
// take (Room.Idle) and, while there are fewer of them than the share
// of whole-GPU demand in what the free GPU share is still expected to
// take (Whole times Room.Free less the GPU demand already waiting), a
// container asking part of a GPU does not take an idle GPU whose node
// would then feed fewer whole GPUs. Such a pod waits, or goes where a
// partly used GPU fits it.
//
// The demand waiting counts in the expectation: pods turned away or
// pending take none of the free share, so keeping eases as they pile
// up, and idle GPUs that whole-GPU pods do not take (they are short of
// CPU where the idle GPUs are, or bound to other models) stop being
// kept. So does the turnover (Room.Turnover): where pods leave, they
// give idle GPUs back before the cluster fills, and none are kept.
type Spare struct {
	// Whole is the share of the GPU demand that asks whole GPUs, 0-1.
	Whole float64
	// WholeCPU is the milli-CPU whole-GPU pods ask per GPU; CPU is the
	// milli-CPU pods with GPUs ask per GPU of their demand. A node's free
	// CPU at these rates bounds what its GPUs count for (Add).
	WholeCPU, CPU float64
}

// SpareOf weighs mix, shapes with their weights (a learned mix): a share
// asked in MiB counts against gpuMemoryMiB, a typical GPU's memory
// (demandShare).
func SpareOf(mix []Shape, gpuMemoryMiB int64) Spare {
	var whole, all, wholeCPU, cpu, wholeGPUs float64
	for i := range mix {
		q := &mix[i]
		if q.Count == 0 || q.Weight <= 0 {
			continue
		}
		w := float64(q.Weight)
		d := float64(demandShare(&q.Demand, gpuMemoryMiB)) / 1000 * float64(q.Count)
		all += w * d
		cpu += w * float64(q.CPUMilli)
		if q.Demand.Exclusive {
			whole += w * d
			wholeGPUs += w * float64(q.Count)
			wholeCPU += w * float64(q.CPUMilli)
		}
	}
	var sp Spare
	if all > 0 {
		sp.Whole, sp.CPU = whole/all, cpu/all
	}
	if wholeGPUs > 0 {
		sp.WholeCPU = wholeCPU / wholeGPUs
	}
	return sp
}

// Room is what nodes leave for Spare to weigh (Spare.Add).
type Room struct {
	// Idle counts the idle GPUs whole-GPU pods could take: on each node
	// at most as many as its free CPU feeds at Spare.WholeCPU.
	Idle float64
	// Free is the free GPU share, in GPUs: on each node at most what its
	// free CPU feeds at Spare.CPU.
	Free float64
	// Turnover is the GPU demand pods released per GPU demand placed,
	// lately, 0-1: 0 while a cluster only fills, near 1 where leaving
	// pods give back as much room as arriving ones take.
	Turnover float64
}

// Add adds what s leaves to r.
func (sp *Spare) Add(r *Room, s *NodeState) {
	var idle, freeMilli int64
	if e := s.derived(); e != nil {
		// The memo's counts, without a walk over the node's GPUs: a
		// cluster's room is read over every node.
		idle, freeMilli = int64(e.idleN), e.healthyN*1000-e.used
	} else {
		for i := range s.GPUs {
			if s.Idle(i) {
				idle++
			}
			freeMilli += s.FreeShare(i)
		}
	}
	free := float64(freeMilli) / 1000
	cpu := float64(max(s.FreeCPU(), 0))
	if sp.CPU > 0 {
		free = min(free, cpu/sp.CPU)
	}
	r.Idle += sp.feeds(float64(idle), cpu)
	r.Free += free
}

// feeds is how many of idle GPUs whole-GPU pods could take with cpu
// milli-CPU free.
func (sp *Spare) feeds(idle, cpu float64) float64 {
	if sp.WholeCPU > 0 {
		idle = min(idle, cpu/sp.WholeCPU)
	}
	return math.Floor(max(idle, 0))
}

// Keeps reports whether idle GPUs are kept spare in a cluster that
// leaves room, with waiting GPUs' worth of demand pending or turned away.
func (sp *Spare) Keeps(room Room, waiting float64) bool {
	return sp.Whole > 0 && room.Idle < sp.Whole*(room.Free-waiting)*(1-min(max(room.Turnover, 0), 1))
}

// kept is what a Spare keeps of a node from a container asking part of a
// GPU.
type kept int

const (
	keptNone kept = iota
	// keptIdle: the node's idle GPUs; the container may take partly
	// used ones.
	keptIdle
	// keptNode: all of the node's GPUs: the pod's CPU alone leaves the
	// node feeding fewer whole-GPU pods.
	keptNode
)

// of reports whether k keeps GPU g of s.
func (k kept) of(s *NodeState, g int) bool {
	return k == keptNode || k == keptIdle && s.Idle(g)
}

// takes says what a container asking part of need GPUs, of a pod asking
// podCPU milli-CPU, must leave of s so as not to take from whole-GPU
// pods: the node, if the pod's CPU alone leaves its idle GPUs feeding
// fewer of them; its idle GPUs, if breaking them (need at most) does;
// else nothing.
func (sp *Spare) takes(s *NodeState, podCPU int64, need int) kept {
	idle := 0
	for i := range s.GPUs {
		if s.Idle(i) {
			idle++
		}
	}
	cpu := float64(s.FreeCPU())
	left := cpu - float64(podCPU)
	switch before := sp.feeds(float64(idle), cpu); {
	case before == 0:
		return keptNone
	case sp.feeds(float64(idle), left) < before:
		return keptNode
	case sp.feeds(float64(idle-min(need, idle)), left) < before:
		return keptIdle
	}
	return keptNone
}
