package cache

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/claim"
	"github.com/gpushare/gpushare/pkg/record"
)

// Cache holds gpushare nodes and the GPUs pods hold on them. It is safe for
// concurrent use.
//
// A pod's allocation record books its GPUs only once the pod is bound to
// the node the record names, and only if the record gives each container
// what its spec asks (alloc.Conform): a record written by anyone but the
// scheduler that bound the pod books nothing. The spec it is checked
// against is the pod's as the record says it was when bound (its
// request-shaping annotations, gpusharev1.Asked): edits of the pod after
// binding are reported, and never free the GPUs the record holds. A
// booked record is not changed by later edits of the annotation. Bookings are held by GPU UUID:
// a GPU that leaves the node's inventory keeps its bookings, unhealthy,
// until their pods end.
type Cache struct {
	logger klog.Logger
	opts   Options
	// reader reads the pods' records by the rules every component
	// follows.
	reader record.Reader

	mu    sync.RWMutex
	nodes map[string]*nodeEntry
	// lastRead is the last entry the latest ReadEach read.
	lastRead atomic.Pointer[nodeEntry]
	// objects holds each entry by the Node object it was last set from,
	// the object kube-scheduler's snapshot hands Filter (ReadNode).
	objects map[*corev1.Node]*nodeEntry
	// rejected holds why a node seen by the informer takes no part.
	rejected map[string]error
	pods     map[types.UID]*podEntry
	// refused holds, per pod, the record value the cache refused, so that
	// each is reported once.
	refused map[types.UID]string
	// unrecorded holds the bound pods on gpushare nodes that carry no
	// record, each checked once: whether it asks for GPUs.
	unrecorded map[types.UID]bool
	// gpuSizes counts the GPUs of each memory size over the nodes, for
	// LargestGPU.
	gpuSizes map[int64]int
	// gpuKinds counts the GPUs of each model, memory and MPS over the
	// nodes, health aside, for Kinds.
	gpuKinds map[gpuKind]int
	// supply counts the healthy GPUs of each kind (model and memory), for
	// Supply; supplyGen counts its changes.
	supply    map[alloc.Supply]int64
	supplyGen atomic.Uint64
	// daemons holds the node daemons' leases and the live use they
	// carry: a side store with its own lock.
	daemons *daemons
	// now is the clock live samples are judged by.
	now func() time.Time
	// bound holds the CPU and memory of each bound pod that has not
	// ended (Options.Resources), and requested their sum per node: what
	// kube-scheduler counts against the node's allocatable.
	bound     map[types.UID]podResources
	requested map[string]podResources
	// claimsOf lists, per pod, the claims reserved for it alone: evicting
	// the pod frees them (HoldingOf).
	claimsOf map[types.UID][]types.UID
	// released holds the claims whose only pod is gone (RemovePod), with
	// that pod: they book nothing while they wait to be deallocated,
	// unless another pod is reserved for them.
	released map[types.UID]types.UID
	// holds holds the defragmentation plans' holds by key, and joining
	// the hold each moved pod's booking joins when it ends (hold.go).
	holds   map[string]*hold
	joining map[types.UID]string
	// churn follows the GPU demand placed, released and turned away, and
	// waiting holds what each pod that found no room asks (Wait), for
	// Room; nWaiting is len(waiting), read without the lock.
	churn    alloc.Churn
	waiting  map[types.UID]*alloc.PodRequest
	nWaiting atomic.Int64
}

// podResources is a pod's CPU and memory request on a node.
type podResources struct {
	node          string
	cpu, memoryMi int64
}

// Options are the cache's dependencies on the adapter that feeds it.
type Options struct {
	// Requests translates a pod's spec into what it asks of GPUs, the
	// measure its record is checked against. Nil checks a record's
	// shape against its node only.
	Requests func(*corev1.Pod) (*alloc.PodRequest, error)
	// Resources, if set, gives a pod's CPU (milli) and memory (MiB)
	// request: the cache then counts every bound pod's against its node,
	// so that a node's state shows the CPU and memory left, which
	// fragmentation-aware policies weigh. Nil counts none.
	Resources func(*corev1.Pod) (cpuMilli, memoryMiB int64)
	// Refused, if set, is told once per record value that the cache does
	// not book, with why (the adapter emits an event on the pod); once
	// per change of a booked pod's request-shaping annotations, with an
	// error that is record.ErrRequestEdited; and once per record it books
	// though it is not what the pod asks, with an error that is
	// record.ErrUnconforming.
	Refused func(pod *corev1.Pod, err error)
	// RequestAnnotations, if set, gives the annotations that shape a
	// pod's request (resource.Model.RequestAnnotations): a record that
	// keeps their values at binding (gpusharev1.Asked) is checked against
	// the pod with those values. Nil checks every record against the pod
	// as it is.
	RequestAnnotations func(*corev1.Pod) []string
}

// LiveStaleAfter is how old a node's live GPU sample may be before
// load-aware scoring ignores it and goes by bookings alone.
const LiveStaleAfter = 3 * time.Minute

type nodeEntry struct {
	// What ReadEach reads of an entry comes first, in the order it reads
	// it: the entry's first 64 bytes, then sum.
	//
	// gone is set once the entry is no longer in Cache.nodes.
	gone bool
	// short holds the name's bytes in the entry itself when they fit
	// (shortLen 0 when they do not), so that ReadEach's check of the
	// next entry reads no memory beyond the entry.
	shortLen uint8
	short    [46]byte
	// after is the entry that followed this one in the latest ReadEach
	// that read both: callers name nodes in an order of their own, the
	// same from call to call.
	after atomic.Pointer[nodeEntry]
	state *alloc.NodeState
	// sum is state's Summary, made again after every change to state
	// (resum), so that rating a node that has not changed reads the entry
	// alone.
	sum alloc.Summary
	// name is the node's name, the entry's key in Cache.nodes.
	name string
	// object is the Node the entry was last set from, and source what
	// of it the inventory was read from.
	object *corev1.Node
	source nodeSource
	// inventory is the node as its inventory says; state.Node is a copy
	// with a GPU appended, unhealthy, for each UUID that a booked record
	// holds and the inventory no longer lists, and with GPUs under a
	// conflicting booking marked unhealthy.
	inventory *alloc.Node
	// liveAt is when state.Live was sampled.
	liveAt time.Time
	// nodeUsage is the live use the Node's own annotation holds, parsed:
	// what daemons before the use moved to the lease write, kept as the
	// fallback of a node whose lease carries none.
	nodeUsage *gpusharev1.GPUUsage
	// pods holds every entry on this node, booked or not, so that a new
	// inventory can be rebuilt with their bookings.
	pods nodePods
	// over is, per GPU of state.Node, what conflicting bookings hold
	// beyond state.GPUs: the metrics show it, so that an over-commit is
	// never hidden. Nil while there is no conflict. past marks, of those
	// GPUs, the ones a conflicting booking took past their capacity: its
	// other GPUs are held full, not over-committed.
	over []alloc.Usage
	past []bool
}

// nodePods are the entries on one node, each with its key in
// Cache.pods. A node holds a few; a slice holds them in a fraction of the
// memory of a map, which at thousands of nodes is megabytes.
type nodePods []nodePod

type nodePod struct {
	uid   types.UID
	entry *podEntry
}

// get returns the entry of uid; nil if there is none.
func (s nodePods) get(uid types.UID) *podEntry {
	for _, n := range s {
		if n.uid == uid {
			return n.entry
		}
	}
	return nil
}

// set makes p the entry of uid.
func (s *nodePods) set(uid types.UID, p *podEntry) {
	for i := range *s {
		if (*s)[i].uid == uid {
			(*s)[i].entry = p
			return
		}
	}
	*s = append(*s, nodePod{uid: uid, entry: p})
}

// remove drops the entry of uid.
func (s *nodePods) remove(uid types.UID) {
	*s = slices.DeleteFunc(*s, func(n nodePod) bool { return n.uid == uid })
}

type podEntry struct {
	key       string
	node      string
	placement *alloc.Placement
	// assumed is true between Assume and the informer's delivery of the
	// pod with its record.
	assumed bool
	// record is the annotation value the entry came from, so that an
	// unchanged pod update costs nothing, and req what the pod asks (nil
	// without Options.Requests): the record, as placement, is checked
	// against req on each inventory of its node. asked is the record's
	// Asked. alloc is another system's record translated (foreign): it
	// is placed on the node's GPUs by index at each booking. gpushare's
	// own record is kept as its text and placement alone, which name
	// its GPUs by UUID.
	record string
	req    *alloc.PodRequest
	asked  *gpusharev1.Asked
	alloc  *gpusharev1.Allocation
	// pod is kept for reports about the record.
	pod *corev1.Pod
	// invalid is set while the record does not fit its node's inventory
	// or the pod's request: it books nothing then.
	invalid bool
	// conflict is set when the booking did not fit the node (its
	// inventory shrank, or a record over-commits); the GPUs it names are
	// then held full.
	conflict bool
	// unconforming, if set, says why the record is not what the pod
	// asks: it books all the same, and is reported.
	unconforming error
	// noted is set once unconforming has been reported, overNoted once
	// a conflict of gpushare's own record has.
	noted, overNoted bool
	// foreign is set when the record is another system's (record.ForeignAllocation):
	// alloc names its GPUs by index, placed on the node's at its first
	// booking. pinned is set from then on: placement names the GPUs by
	// UUID, as gpushare's own record does, so that a renumbered or
	// shrunk inventory keeps the booking on the GPUs the pod holds.
	foreign bool
	pinned  bool
	// edited lists the request-shaping annotations that changed since
	// the pod was bound: the record still books what it names.
	edited []string
	// claim is set for a ResourceClaim's entry (SetClaim): what its
	// allocation holds of each GPU, placed on the node at each booking.
	claim []claim.GPU
	// owner is the one pod a claim is reserved for, "" if none or several,
	// and ownerName its name, in the claim's namespace.
	owner     types.UID
	ownerName string
}

// New returns an empty cache.
func New(logger klog.Logger, o Options) *Cache {
	return &Cache{
		logger:     logger,
		opts:       o,
		reader:     record.Reader{Requests: o.Requests, RequestAnnotations: o.RequestAnnotations},
		nodes:      make(map[string]*nodeEntry),
		objects:    make(map[*corev1.Node]*nodeEntry),
		rejected:   make(map[string]error),
		pods:       make(map[types.UID]*podEntry),
		refused:    make(map[types.UID]string),
		unrecorded: make(map[types.UID]bool),
		gpuSizes:   make(map[int64]int),
		gpuKinds:   make(map[gpuKind]int),
		supply:     make(map[alloc.Supply]int64),
		daemons:    newDaemons(),
		now:        time.Now,
		bound:      make(map[types.UID]podResources),
		requested:  make(map[string]podResources),
		claimsOf:   make(map[types.UID][]types.UID),
		released:   make(map[types.UID]types.UID),
		holds:      make(map[string]*hold),
		joining:    make(map[types.UID]string),
		waiting:    make(map[types.UID]*alloc.PodRequest),
	}
}
