package cache_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/alloc"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/record"
)

// askKey is the request-shaping annotation of editedCache's model: the
// MiB the pod's one container asks (as gpushare.io/mps-compute or
// GPUlimits shape a real pod's request).
const askKey = "test/mib"

// editedCache returns a cache whose pods ask the MiB of their askKey
// annotation, and the refusals it reports.
func editedCache(t *testing.T) (*cache.Cache, *[]error) {
	t.Helper()
	asks := func(pod *corev1.Pod) (*alloc.PodRequest, error) {
		mib, err := strconv.ParseInt(pod.Annotations[askKey], 10, 64)
		if err != nil {
			return nil, err
		}
		return sharedRequest(pod.Namespace+"/"+pod.Name, "c0", mib), nil
	}
	var reports []error
	r := &logRecorder{}
	c := cache.New(r.logger(), cache.Options{
		Requests:           asks,
		RequestAnnotations: func(*corev1.Pod) []string { return []string{askKey} },
		Refused:            func(_ *corev1.Pod, err error) { reports = append(reports, err) },
	})
	c.SetNode(gpuNode(t, "n1", 15360))
	return c, &reports
}

// askingPod is a pod bound with record a that asks mib now.
func askingPod(t *testing.T, a *gpusharev1.Allocation, mib string) *corev1.Pod {
	t.Helper()
	p := recordedPod(t, "p", a)
	p.Annotations[askKey] = mib
	return p
}

func assertEdited(t *testing.T, c *cache.Cache, n int) {
	t.Helper()
	if err := testutil.CollectAndCompare(cache.NewCollector(c), strings.NewReader(editedMetrics(n)), "gpushare_pods_request_edited"); err != nil {
		t.Error(err)
	}
}

// A pod whose request was edited after binding keeps booking what its
// record names, in a cache that meets it edited (a restarted or new
// leader scheduler): the GPU is never offered to another pod while it
// runs. The edit is reported once, and counted.
func TestEditedRequestKeepsBooking(t *testing.T) {
	c, reports := editedCache(t)
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4096, 0)})
	a.Asked = &gpusharev1.Asked{Annotations: map[string]string{askKey: "4096"}}
	// The tenant asks 1024 MiB now: the record no longer matches.
	edited := askingPod(t, a, "1024")
	c.SetPod(edited)
	c.SetPod(edited)
	if got, want := usage(t, c, "n1"), appUsage(1, a); !cmp.Equal(got, want) {
		t.Fatalf("an edited pod's record books %v, want %v (what it names)", got, want)
	}
	if len(*reports) != 1 || !errors.Is((*reports)[0], record.ErrRequestEdited) || !strings.Contains((*reports)[0].Error(), askKey) {
		t.Fatalf("reports %v, want one ErrRequestEdited naming %s", *reports, askKey)
	}
	assertEdited(t, c, 1)
	// Undoing the edit clears it; the booking never moved.
	c.SetPod(askingPod(t, a, "4096"))
	assertEdited(t, c, 0)
	if got, want := usage(t, c, "n1"), appUsage(1, a); !cmp.Equal(got, want) {
		t.Fatalf("after the edit was undone the record books %v, want %v", got, want)
	}
}

// A cache that booked the pod before the edit (the live scheduler) keeps
// its booking and reports the edit.
func TestEditAfterBookingReported(t *testing.T) {
	c, reports := editedCache(t)
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4096, 0)})
	a.Asked = &gpusharev1.Asked{Annotations: map[string]string{askKey: "4096"}}
	c.SetPod(askingPod(t, a, "4096"))
	if len(*reports) != 0 {
		t.Fatalf("an unedited pod was reported: %v", *reports)
	}
	c.SetPod(askingPod(t, a, "15360"))
	if got, want := usage(t, c, "n1"), appUsage(1, a); !cmp.Equal(got, want) {
		t.Fatalf("after the edit the record books %v, want %v", got, want)
	}
	if len(*reports) != 1 || !errors.Is((*reports)[0], record.ErrRequestEdited) {
		t.Fatalf("reports %v, want one ErrRequestEdited", *reports)
	}
	assertEdited(t, c, 1)
	c.RemovePod("p")
	assertEdited(t, c, 0)
}

// A record must still be what the pod asked when it was bound: one that
// books more than its own Asked says (written by hand) is reported, and
// books what it names all the same: its pod runs, and nothing else may
// land on those GPUs (fail closed).
func TestForgedAskedReportedAndBooked(t *testing.T) {
	c, reports := editedCache(t)
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 15360, 0)})
	a.Asked = &gpusharev1.Asked{Annotations: map[string]string{askKey: "1024"}}
	c.SetPod(askingPod(t, a, "1024"))
	if got, want := usage(t, c, "n1"), appUsage(1, a); !cmp.Equal(got, want) {
		t.Fatalf("a record beyond what the pod asked books %v, want what it names, %v", got, want)
	}
	if len(*reports) != 1 || !errors.Is((*reports)[0], alloc.ErrNonconforming) || !errors.Is((*reports)[0], record.ErrUnconforming) {
		t.Fatalf("reports %v, want one ErrUnconforming, ErrNonconforming", *reports)
	}
	assertUnconforming(t, c, 1)
	c.RemovePod("p")
	assertUnconforming(t, c, 0)
}

// A record written before Asked existed is checked against the pod as it
// is, as before, and books what it names where it does not match.
func TestRecordWithoutAskedCheckedAsItIs(t *testing.T) {
	c, reports := editedCache(t)
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4096, 0)})
	c.SetPod(askingPod(t, a, "1024"))
	if got, want := usage(t, c, "n1"), appUsage(1, a); !cmp.Equal(got, want) {
		t.Fatalf("a record without Asked that does not match its pod books %v, want %v", got, want)
	}
	if len(*reports) != 1 || !errors.Is((*reports)[0], alloc.ErrNonconforming) {
		t.Fatalf("reports %v, want one ErrNonconforming", *reports)
	}
}

// A changed resource model (here: the pod's request can no longer be read
// at all) does not free a running pod's GPUs: its record keeps booking,
// and is reported once.
func TestUnreadableRequestKeepsBooking(t *testing.T) {
	c, reports := editedCache(t)
	a := appRecord("n1", []gpusharev1.GPUShare{share("n1", 0, 4096, 0)})
	c.SetPod(askingPod(t, a, "not a number"))
	c.SetPod(askingPod(t, a, "not a number"))
	if got, want := usage(t, c, "n1"), appUsage(1, a); !cmp.Equal(got, want) {
		t.Fatalf("a record whose pod's request cannot be read books %v, want %v", got, want)
	}
	if len(*reports) != 1 || !errors.Is((*reports)[0], record.ErrUnconforming) {
		t.Fatalf("reports %v, want one ErrUnconforming", *reports)
	}
	assertUnconforming(t, c, 1)
}

func assertUnconforming(t *testing.T, c *cache.Cache, n int) {
	t.Helper()
	if err := testutil.CollectAndCompare(cache.NewCollector(c), strings.NewReader(unconformingMetrics(n)), "gpushare_allocation_records_unconforming"); err != nil {
		t.Error(err)
	}
}
