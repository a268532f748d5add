// Package refused frees the GPUs that a ResourceClaim the node will not
// prepare holds.
//
// DRA's allocator picks a GPU from the node's ResourceSlice, which can
// lag what the pods bound a moment ago book (gpushare-dra republishes it
// once their records are written), and with stock kube-scheduler nothing
// else checks the pick. A claim allocated past what its GPU has left is
// refused by the node's Prepare, and kubelet retries for as long as the
// pod lives: the claim stays allocated, its pod never starts, and the
// GPU is booked past its memory until someone deletes the pod.
//
// A Releaser deletes such a pod once it has waited Grace without a
// container started and the node has said, since, that it refused the
// claim for the over-commit (the kubelet's FailedPrepareDynamicResources
// event on the pod, with gpushare-dra's reason), with a
// Warning event that says why: its claim is then released (deallocated,
// or deleted with the pod when a template made it), and a pod a
// controller owns is created again and placed where its claim fits. A
// pod that has started, or that waits for something else (an image, a
// volume) with no refusal from its node, is never touched.
//
// The race goes the other way too: a claim prepared before the record of
// a pod bound beside it reached the node. gpushare-node then refuses
// that pod's containers (dra.Preparer.Beside), the kubelet says so in a
// Failed event, and the Releaser deletes that pod the same way.
package refused

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	gpucache "github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/record"
)

// Reason is the reason of the Warning event on a pod deleted to release
// its claim.
const Reason = "GPUClaimReleased"

// DefaultGrace is how long a pod bound with an over-committing claim
// waits, with no container started, before the kubelet's refusal of the
// claim gets it deleted: the kubelet prepares claims within seconds of
// the binding and posts a refusal again at each retry.
const DefaultGrace = 30 * time.Second

// Config is what a Releaser reads and acts through.
type Config struct {
	// Bookings returns the claims and records that book an
	// over-committed GPU (gpucache.Cache.OverCommitted).
	Bookings func() []gpucache.Overbooked
	Pods     corelisters.PodLister
	Client   kubernetes.Interface
	// Recorder records the event on the pod; nil for none.
	Recorder events.EventRecorder
	Logger   klog.Logger
	// Grace is DefaultGrace if zero.
	Grace time.Duration
	// Now is time.Now if nil.
	Now func() time.Time
}

// Releaser deletes the pods whose claims their node refuses (see the
// package's doc). Its zero value does nothing until Start.
type Releaser struct {
	// Leading, if set, reports whether this replica leads: one that does
	// not reads no events and deletes nothing. Set it before Run.
	Leading func() bool

	mu  sync.Mutex
	cfg *Config
	// seen is when each pod was first found waiting with an
	// over-committing claim; settling, per node, until when a deletion
	// there is left to show in the cache before the next.
	seen     map[types.UID]time.Time
	settling map[string]time.Time
	// asked is when the events of each waiting pod were last read: at
	// most once per recheck.
	asked map[types.UID]time.Time
}

// recheck is how often the events of a pod still waiting are read again.
const recheck = 5 * time.Second

// Start makes r act through cfg; until then Release does nothing. Only
// the first call counts: the scheduler's profiles share one cache.
func (r *Releaser) Start(cfg Config) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cfg != nil {
		return
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r.cfg = &cfg
	r.seen = map[types.UID]time.Time{}
	r.settling = map[string]time.Time{}
	r.asked = map[types.UID]time.Time{}
}

// Run calls Release every tick until ctx ends.
func (r *Releaser) Run(ctx context.Context, every time.Duration) {
	wait.UntilWithContext(ctx, r.Release, every)
}

// candidate is a pod that waits with a claim or record its node
// refuses.
type candidate struct {
	booking gpucache.Overbooked
	pod     *corev1.Pod
	since   time.Time
}

// Release deletes, on each node, a pod whose claim over-commits a GPU
// there, that waited Grace unstarted and whose claim the kubelet says it
// refused: the one bound last among those, one per node and then none
// there for Grace, so that the cache shows the room a deletion frees
// before anything else there is judged.
func (r *Releaser) Release(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cfg == nil {
		return
	}
	cfg := r.cfg
	now := cfg.Now()
	byNode := map[string][]candidate{}
	waiting := map[types.UID]bool{}
	for _, oc := range cfg.Bookings() {
		if oc.Pod == "" {
			// A shared claim: deleting one of its pods would not
			// release it.
			continue
		}
		pod, err := cfg.Pods.Pods(oc.Namespace).Get(oc.Pod)
		if err != nil || pod.UID != oc.PodUID || !Waiting(pod, oc.Node, oc.Containers) {
			continue
		}
		waiting[pod.UID] = true
		since, ok := r.seen[pod.UID]
		if !ok {
			since = now
			r.seen[pod.UID] = now
		}
		byNode[oc.Node] = append(byNode[oc.Node], candidate{booking: oc, pod: pod, since: since})
	}
	for uid := range r.seen {
		if !waiting[uid] {
			delete(r.seen, uid)
			delete(r.asked, uid)
		}
	}
	for node, until := range r.settling {
		if !now.Before(until) {
			delete(r.settling, node)
		}
	}
	leads := -1 // not asked yet; then 0 or 1
	for node, cs := range byNode {
		if _, ok := r.settling[node]; ok {
			continue
		}
		cs = slices.DeleteFunc(cs, func(c candidate) bool { return now.Sub(c.since) < cfg.Grace })
		if len(cs) == 0 {
			continue
		}
		// The one bound last first, among those its node refused.
		slices.SortFunc(cs, func(a, b candidate) int {
			if c := boundAt(b.pod).Compare(boundAt(a.pod)); c != 0 {
				return c
			}
			return strings.Compare(b.pod.Namespace+"/"+b.pod.Name, a.pod.Namespace+"/"+a.pod.Name)
		})
		for _, c := range cs {
			if at, ok := r.asked[c.pod.UID]; ok && now.Sub(at) < recheck {
				continue
			}
			if leads < 0 {
				leads = 1
				if r.Leading != nil && !r.Leading() {
					leads = 0
					cfg.Logger.V(2).Info("Not the leader: leaving the pods that over-commit a GPU to it")
				}
			}
			if leads == 0 {
				break
			}
			r.asked[c.pod.UID] = now
			if !refusedByNode(ctx, cfg, c.pod, c.booking.Claim, c.since) {
				continue
			}
			if r.release(ctx, cfg, c, now) {
				r.settling[node] = now.Add(cfg.Grace)
			}
			break
		}
	}
}

// KubeletRefusal is the reason of the kubelet's event on a pod whose
// claims the node's DRA drivers refused to prepare.
const KubeletRefusal = "FailedPrepareDynamicResources"

// KubeletFailed is the reason of the kubelet's event on a pod whose
// container it could not create: where gpushare-node refused it beside
// the claims prepared on its GPU, the message says so (BesideWords).
const KubeletFailed = "Failed"

// BesideWords are in gpushare-node's refusal of a container whose record
// came after the claims prepared on its GPU (dra.Preparer.Beside).
const BesideWords = "ResourceClaims prepared on it first"

// refusedByNode reports whether the kubelet says it refused pod for an
// over-commit: for claim (namespace/name), its FailedPrepareDynamicResources
// event naming the claim with gpushare-dra's words ("would hold"); for a
// record (claim ""), its Failed event with gpushare-node's (BesideWords);
// either seen again since the over-commit was found (less eventSkew).
// The kubelet posts those reasons for passing trouble too (a claim not
// yet reserved, a driver not yet registered, an image not pulled), and
// posts a refusal again at each retry. Only the kubelet, and those who
// may write events in the pod's namespace, write it; a tenant who forges
// one there loses only its own pod.
func refusedByNode(ctx context.Context, cfg *Config, pod *corev1.Pod, claim string, since time.Time) bool {
	reason, words := KubeletRefusal, []string{claim, "would hold"}
	if claim == "" {
		reason, words = KubeletFailed, []string{"would hold", BesideWords}
	}
	list, err := cfg.Client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.uid", string(pod.UID)),
			fields.OneTermEqualSelector("reason", reason)).String()})
	if err != nil {
		cfg.Logger.Error(err, "Reading the events of a pod that over-commits its GPU; trying again later", "pod", klog.KObj(pod))
		return false
	}
	for _, e := range list.Items {
		if e.InvolvedObject.UID == pod.UID && e.Reason == reason && e.Source.Component == "kubelet" &&
			!slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(e.Message, w) }) &&
			!lastSeen(&e).Before(since.Add(-eventSkew)) {
			return true
		}
	}
	cfg.Logger.V(2).Info("A pod waits with a booking that over-commits its GPU, but its node has not refused it since", "pod", klog.KObj(pod),
		"claim", claim, "since", since)
	return false
}

// eventSkew is how much earlier than the over-commit was found a
// refusal may have been seen: the kubelet's clock and this one differ,
// and the informers lag.
const eventSkew = 10 * time.Second

// lastSeen is when event e was last observed.
func lastSeen(e *corev1.Event) time.Time {
	t := e.LastTimestamp.Time
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if e.EventTime.After(t) {
		t = e.EventTime.Time
	}
	if e.FirstTimestamp.After(t) {
		t = e.FirstTimestamp.Time
	}
	return t
}

// release deletes c's pod, and reports whether it did.
func (r *Releaser) release(ctx context.Context, cfg *Config, c candidate, now time.Time) bool {
	b := c.booking
	logger := klog.LoggerWithValues(cfg.Logger, "pod", klog.KObj(c.pod), "claim", b.Claim, "node", b.Node)
	why := fmt.Sprintf("ResourceClaim %s books GPU %s of node %s past what it has beside the pods and claims booked there, "+
		"and the pod has not started in %s: "+
		"the node refuses to prepare the claim. Deleted so that the claim is released%s",
		b.Claim, joinInts(b.GPUs), b.Node, now.Sub(c.since).Round(time.Second), recreated(c.pod))
	if b.Claim == "" {
		why = fmt.Sprintf("The pod's allocation record books GPU %s of node %s, where ResourceClaims prepared before the record "+
			"reached the node hold what it needs, and the pod has not started in %s: the node refuses its containers. "+
			"Deleted so that its GPUs are freed%s",
			joinInts(b.GPUs), b.Node, now.Sub(c.since).Round(time.Second), recreated(c.pod))
	}
	uid := c.pod.UID
	err := cfg.Client.CoreV1().Pods(c.pod.Namespace).Delete(ctx, c.pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Deleting a pod whose claim the node refuses failed; trying again later")
		return false
	}
	delete(r.seen, uid)
	if err != nil {
		return false
	}
	logger.Info("Deleted a pod its node refuses", "gpus", b.GPUs)
	if cfg.Recorder != nil {
		cfg.Recorder.Eventf(c.pod, nil, corev1.EventTypeWarning, Reason, "Delete", "%s", why)
	}
	return true
}

// recreated says what follows the deletion of pod.
func recreated(pod *corev1.Pod) string {
	if o := metav1.GetControllerOf(pod); o != nil {
		return fmt.Sprintf("; its %s %s creates it again, placed where it fits", o.Kind, o.Name)
	}
	return "; no controller owns the pod: create it again to have it placed where it fits"
}

// Waiting reports whether pod is bound to node, not ended nor being
// deleted, and none of containers (all of the pod's if nil) has started:
// what a pod whose claims its node refuses to prepare looks like (none of
// its containers starts), and one whose record's containers it refuses
// (containers: those the record gives GPUs; an init container that asks
// none may have run).
func Waiting(pod *corev1.Pod, node string, containers []string) bool {
	if pod.Spec.NodeName != node || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return false
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range list {
			if (containers == nil || slices.Contains(containers, s.Name)) && record.Ran(pod, s.Name) {
				return false
			}
		}
	}
	return true
}

// boundAt is when pod was bound: its PodScheduled condition's time, else
// its creation.
func boundAt(pod *corev1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return pod.CreationTimestamp.Time
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}
