package plugin

import (
	"context"
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/defrag"
	"github.com/gpushare/gpushare/pkg/record"
	"github.com/gpushare/gpushare/pkg/refused"
	"github.com/gpushare/gpushare/pkg/resource"
)

// Shared is what the GPUShare plugins of every profile of one scheduler
// share. One cache serves every profile: profiles schedule pods one at a
// time from one queue, but bind them concurrently, so a booking made
// under one profile must be seen by the others at once. The metrics are
// shared too. Each profile registers its resource model and event
// recorder, with which the cache checks and reports the records of that
// profile's pods.
//
// Build one with NewShared in the scheduler's main, hand it to New, and
// run its Movers and its Releaser.
type Shared struct {
	register func(...prometheus.Collector)

	once    sync.Once
	cache   *gpucache.Cache
	synced  func() bool
	metrics *metrics
	err     error

	profiles profiles

	// Movers follows the defragmentation plans of the profiles that
	// move pods: the scheduler's main runs it (defrag.Loop.Run).
	Movers defrag.Loop
	// Releaser deletes the pods bound with a claim their node refuses to
	// prepare: the scheduler's main runs it (refused.Releaser.Run).
	Releaser refused.Releaser
}

// NewShared returns the state the plugins of one scheduler share; the
// first plugin built registers the metrics with register, e.g.
// legacyregistry.RawMustRegister for the scheduler's /metrics.
func NewShared(register func(...prometheus.Collector)) *Shared {
	return &Shared{register: register, profiles: profiles{byName: map[string]profile{}}}
}

// profiles are the scheduler's profiles that run GPUShare.
type profiles struct {
	mu     sync.RWMutex
	byName map[string]profile
	first  string
}

type profile struct {
	model    *resource.Model
	recorder events.EventRecorder
}

func (ps *profiles) add(name string, p profile) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.first == "" {
		ps.first = name
	}
	ps.byName[name] = p
}

// of returns the profile that schedules pod: its schedulerName's, or the
// first profile's for a pod of another scheduler (a record of another
// gpushare scheduler of the cluster still books its GPUs).
func (ps *profiles) of(pod *corev1.Pod) profile {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	name := pod.Spec.SchedulerName
	if name == "" {
		name = corev1.DefaultSchedulerName
	}
	if p, ok := ps.byName[name]; ok {
		return p
	}
	return ps.byName[ps.first]
}

// join registers the profile of h with model, and on the first call sets
// up the cache: its watch on h's informers, its lease watch, its expiry,
// and the metrics.
func (s *Shared) join(ctx context.Context, logger klog.Logger, h fwk.Handle, model *resource.Model) error {
	s.profiles.add(h.ProfileName(), profile{model: model, recorder: h.EventRecorder()})
	s.once.Do(func() {
		s.cache = gpucache.New(logger, gpucache.Options{
			Requests: func(pod *corev1.Pod) (*alloc.PodRequest, error) {
				return s.profiles.of(pod).model.PodRequest(pod)
			},
			Refused: func(pod *corev1.Pod, err error) {
				RecordRefused(s.profiles.of(pod).recorder, pod, err)
			},
			RequestAnnotations: func(pod *corev1.Pod) []string {
				return s.profiles.of(pod).model.RequestAnnotations()
			},
			Resources: resource.PodCPUMemory,
		})
		defer func() { go gpucache.RunExpiry(ctx, s.cache) }()
		synced, err := gpucache.Watch(s.cache, h.SharedInformerFactory())
		if err != nil {
			s.err = err
			return
		}
		// What DRA claims hold of gpushare's devices books the same GPUs.
		claimsSynced, err := gpucache.WatchClaims(s.cache, h.SharedInformerFactory())
		if err != nil {
			s.err = err
			return
		}
		s.synced = func() bool { return synced() && claimsSynced() }
		s.Releaser.Start(refused.Config{Bookings: s.cache.OverCommitted, Pods: h.SharedInformerFactory().Core().V1().Pods().Lister(),
			Client: h.ClientSet(), Recorder: h.EventRecorder(), Logger: logger})
		go gpucache.WatchLeases(ctx, s.cache, h.ClientSet(), func(node string) { activatePending(ctx, h, node) })
		s.metrics = newMetrics()
		if s.register != nil {
			s.register(gpucache.NewCollector(s.cache))
			s.register(s.metrics.collectors()...)
			s.register(waitingCollector(s.cache.Waiting))
		}
	})
	return s.err
}

// ReasonRecordRefused is the reason of the Warning event on a pod whose
// allocation record books nothing.
const ReasonRecordRefused = "GPUAllocationRefused"

// ReasonNoRecord is the reason of the Warning event on a pod that asks
// for GPUs and was bound to a gpushare node without gpushare's record.
const ReasonNoRecord = "GPUNotAllocated"

// ReasonRequestEdited is the reason of the Warning event on a running pod
// whose request-shaping annotations changed after it was bound: its
// record keeps booking its GPUs.
const ReasonRequestEdited = "GPURequestEdited"

// ReasonRecordUnconforming is the reason of the Warning event on a
// running pod whose record is not what the pod asks (the resource model
// reads its request otherwise now, or the record was written by hand):
// the record keeps booking its GPUs.
const ReasonRecordUnconforming = "GPUAllocationUnconforming"

// ReasonRecordOverCommitted is the reason of the Warning event on a pod
// whose record does not fit its GPUs beside the records booked before it
// (record.ErrOverCommitted): its GPUs are held full.
const ReasonRecordOverCommitted = "GPUAllocationOverCommitted"

// RecordRefused emits the Warning event that says why a pod's allocation
// record books no GPU, or books though it is not what the pod asks.
func RecordRefused(r events.EventRecorder, pod *corev1.Pod, err error) {
	if r == nil {
		return
	}
	if errors.Is(err, gpucache.ErrNoRecord) {
		r.Eventf(pod, nil, corev1.EventTypeWarning, ReasonNoRecord, "Check", "%v", err)
		return
	}
	if errors.Is(err, record.ErrRequestEdited) {
		r.Eventf(pod, nil, corev1.EventTypeWarning, ReasonRequestEdited, "Check", "%v", err)
		return
	}
	if errors.Is(err, record.ErrUnconforming) {
		r.Eventf(pod, nil, corev1.EventTypeWarning, ReasonRecordUnconforming, "Check", "%v", err)
		return
	}
	if errors.Is(err, record.ErrOverCommitted) {
		r.Eventf(pod, nil, corev1.EventTypeWarning, ReasonRecordOverCommitted, "Check", "%v", err)
		return
	}
	if errors.Is(err, record.ErrForeignRecord) {
		r.Eventf(pod, nil, corev1.EventTypeWarning, ReasonRecordRefused, "Check", "gpushare cannot adopt this pod's placement: %v", err)
		return
	}
	r.Eventf(pod, nil, corev1.EventTypeWarning, ReasonRecordRefused, "Check",
		"gpushare books no GPU for this pod's %s annotation: %v", gpusharev1.AllocationAnnotation, err)
}
