package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	specs "tags.cncf.io/container-device-interface/specs-go"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
	"github.com/gpushare/gpushare/pkg/cdi"
	"github.com/gpushare/gpushare/pkg/gpu"
)

// Kind is the CDI kind of the devices Prepare writes: one per request of
// a claim, named <claim UID>-<request>.
const Kind = "gpu.gpushare.io/claim"

// sharesAnnotation, on each spec Prepare writes, holds what the claim's
// request consumes of each GPU (JSON, versioned): the spec files are the
// driver's record of what it prepared, read again after a restart.
const sharesAnnotation = "gpu.gpushare.io/shares"

// sharesVersion is the version of the shares annotation's JSON.
const sharesVersion = "v1alpha1"

type sharesRecord struct {
	Version   string `json:"version"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Devices maps a device name to what the request consumes of it.
	Devices map[string]Share `json:"devices"`
}

// Preparer prepares the claims allocated devices of this node's pool:
// for each request, a CDI spec that gives a container its GPUs with the
// same edits as the device plugin's (visible devices, the GPUs' device
// nodes, under MPS the limits sized from the consumed capacity).
type Preparer struct {
	// Dir is the CDI spec directory the container runtime reads.
	Dir string
	// Pool is this node's pool (the node's name).
	Pool string
	// GPUs returns the node's GPUs.
	GPUs func() []gpu.Device
	// MPS, if set, is the node's MPS daemon: claims' containers become
	// its clients.
	MPS *cdi.MPS
	// Booked, if set, returns what else holds the GPUs, by GPU UUID: the
	// pods whose allocation records (extended resources) book them.
	// Prepare counts it with the claims; an error refuses the claim.
	Booked func() (map[string]Share, error)

	mu sync.Mutex
}

// Prepare writes the CDI specs of claim's requests for this pool's
// devices and returns the devices with their CDI device IDs, as the
// kubelet plugin answers them. It is
// idempotent. It refuses a claim not allocated, a device this node does
// not have or that is not healthy, a consumption that is not ours, and
// one that, with what the claims prepared before hold and what pods book
// (Booked), would take more than a GPU's usable memory or compute: the
// last line of defense against an over-commit.
func (p *Preparer) Prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	uid := string(claim.UID)
	if uid == "" || strings.ContainsAny(uid, "/\\") {
		return nil, fmt.Errorf("claim %s/%s has no usable UID %q", claim.Namespace, claim.Name, uid)
	}
	byName := map[string]gpu.Device{}
	for _, g := range p.GPUs() {
		byName[DeviceName(g.Index)] = g
	}
	// The shares of each request, in the order of the results.
	var requests []string
	shares := map[string]*sharesRecord{}
	var out []kubeletplugin.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != Driver || r.Pool != p.Pool {
			continue
		}
		g, ok := byName[r.Device]
		if !ok || !g.Healthy {
			return nil, fmt.Errorf("claim %s/%s: device %s is not a healthy GPU of this node", claim.Namespace, claim.Name, r.Device)
		}
		s, err := Consumed(r, g)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		rec := shares[r.Request]
		if rec == nil {
			rec = &sharesRecord{Version: sharesVersion, Namespace: claim.Namespace, Name: claim.Name, Devices: map[string]Share{}}
			shares[r.Request] = rec
			requests = append(requests, r.Request)
		}
		if _, twice := rec.Devices[r.Device]; twice {
			return nil, fmt.Errorf("claim %s/%s: request %s holds device %s twice", claim.Namespace, claim.Name, r.Request, r.Device)
		}
		rec.Devices[r.Device] = s
		out = append(out, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{Kind + "=" + cdiName(uid, r.Request)}})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	unlock, err := lockDir(p.Dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	held, err := p.heldLocked(uid)
	if err != nil {
		return nil, err
	}
	var booked map[string]Share
	if p.Booked != nil {
		if booked, err = p.Booked(); err != nil {
			return nil, fmt.Errorf("claim %s/%s: reading what the node's pods book: %w", claim.Namespace, claim.Name, err)
		}
	}
	// Only the claim's own GPUs: another GPU past its capacity (a record
	// that came after the claims there) is not this claim's doing.
	mine := map[string]bool{}
	for _, req := range requests {
		for dev, s := range shares[req].Devices {
			held[dev] = held[dev].add(s)
			mine[dev] = true
		}
	}
	for _, dev := range slices.Sorted(maps.Keys(mine)) {
		g, h := byName[dev], held[dev]
		b := booked[g.UUID]
		if exceeds(g, h, b) {
			return nil, fmt.Errorf("claim %s/%s: GPU %s would hold %d of %d MiB and %d%% compute with the claims prepared on it "+
				"and the pods that book it (%d MiB, %d%%): refused",
				claim.Namespace, claim.Name, dev, h.MemoryMiB+b.MemoryMiB, usableMiB(g), h.ComputePercent+b.ComputePercent, b.MemoryMiB, b.ComputePercent)
		}
	}
	for _, req := range requests {
		if err := p.write(uid, req, shares[req], byName); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// write writes the CDI spec of claim uid's request.
func (p *Preparer) write(uid, request string, rec *sharesRecord, gpus map[string]gpu.Device) error {
	c := &gpusharev1.ContainerAllocation{Name: request}
	nodes := map[string]string{}
	for _, dev := range slices.Sorted(maps.Keys(rec.Devices)) {
		g, s := gpus[dev], rec.Devices[dev]
		c.GPUs = append(c.GPUs, gpusharev1.GPUShare{Index: g.Index, UUID: g.UUID, MemoryMiB: s.MemoryMiB, Compute: s.ComputePercent})
		if g.DeviceNode != "" {
			nodes[g.UUID] = g.DeviceNode
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	name := cdiName(uid, request)
	tmp, err := cdi.StageSpec(p.Dir, &specs.Spec{Kind: Kind, Annotations: map[string]string{sharesAnnotation: string(b)},
		Devices: []specs.Device{{Name: name, ContainerEdits: cdi.GPUEdits(c, p.MPS, nodes)}}})
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, p.specPath(name)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// Unprepare removes the CDI specs of the claim uid; a claim not prepared
// is no error.
func (p *Preparer) Unprepare(uid string) error {
	if uid == "" || strings.ContainsAny(uid, "/\\") {
		return fmt.Errorf("no usable claim UID %q", uid)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	paths, err := filepath.Glob(filepath.Join(p.Dir, specPrefix+globEscape(uid)+"-*.json"))
	if err != nil {
		return err
	}
	var errs []error
	for _, path := range paths {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Beside checks gpus (by UUID), which a container is about to use under
// its pod's allocation record, against the claims prepared on them: it
// returns an error naming the first that the claims and what the node's
// pods book (booked, by UUID: PodBookings, that pod's record included;
// called only where a claim holds one of gpus) take past its usable
// memory or compute. Prepare counts the records it sees, so this
// happens only to a record that reached the node after a claim on its
// GPU was prepared (the scheduler placed both from a view that lacked
// the other): gpushare-node then refuses the container, and the claim's
// container keeps what it was given.
func (p *Preparer) Beside(gpus []string, booked func() map[string]Share) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	unlock, err := lockDir(p.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	held, err := p.heldLocked("")
	if err != nil {
		return err
	}
	var books map[string]Share
	for _, g := range sortedByIndex(p.GPUs()) {
		h := held[DeviceName(g.Index)]
		if h == (Share{}) || !slices.Contains(gpus, g.UUID) {
			continue
		}
		if books == nil {
			books = booked()
		}
		if b := books[g.UUID]; exceeds(g, h, b) {
			return fmt.Errorf("GPU %d (%s) would hold %d of %d MiB and %d%% compute with the pods that book it (%d MiB, %d%%) "+
				"and the ResourceClaims prepared on it first (%d MiB, %d%%): refused",
				g.Index, g.UUID, h.MemoryMiB+b.MemoryMiB, usableMiB(g), h.ComputePercent+b.ComputePercent, b.MemoryMiB, b.ComputePercent,
				h.MemoryMiB, h.ComputePercent)
		}
	}
	return nil
}

// exceeds reports whether held, what claims hold of GPU g, with booked,
// what pods' records book of it, is more than g has for them.
func exceeds(g gpu.Device, held, booked Share) bool {
	return held.MemoryMiB+booked.MemoryMiB > usableMiB(g) || held.ComputePercent+booked.ComputePercent > 100
}

// lockDir takes the exclusive lock (flock) of the CDI directory dir
// itself, waiting for it, and returns its release. Prepare and Beside
// hold it while they check and write: gpushare-dra and gpushare-node,
// two processes on one directory, each see what the other decided. The
// directory, not a file in it, so that no one can delete the lock from
// under them.
func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("locking the claims' specs: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking the claims' specs: %w", err)
	}
	// Closing the file releases the lock.
	return func() { _ = f.Close() }, nil
}

// Held returns what the prepared claims hold of each device.
func (p *Preparer) Held() (map[string]Share, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heldLocked("")
}

// heldLocked sums the shares the specs in Dir record, but those of claim
// except (p.mu held).
func (p *Preparer) heldLocked(except string) (map[string]Share, error) {
	paths, err := filepath.Glob(filepath.Join(p.Dir, specPrefix+"*.json"))
	if err != nil {
		return nil, err
	}
	held := map[string]Share{}
	for _, path := range paths {
		if except != "" && strings.HasPrefix(filepath.Base(path), specPrefix+except+"-") {
			continue
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		var s specs.Spec
		var rec sharesRecord
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if err := json.Unmarshal([]byte(s.Annotations[sharesAnnotation]), &rec); err != nil {
			return nil, fmt.Errorf("reading %s's shares record: %w", path, err)
		}
		if rec.Version != sharesVersion {
			return nil, fmt.Errorf("reading %s: shares record version %q, want %s", path, rec.Version, sharesVersion)
		}
		for dev, sh := range rec.Devices {
			held[dev] = held[dev].add(sh)
		}
	}
	return held, nil
}

// specPrefix begins the names of the spec files Prepare writes: not a
// name the device plugin's sweep removes.
const specPrefix = "gpushare-dra-"

func (p *Preparer) specPath(name string) string { return filepath.Join(p.Dir, specPrefix+name+".json") }

// cdiName is the CDI device of claim uid's request: a subrequest's
// reference (request/subrequest) with its slash replaced.
func cdiName(uid, request string) string { return uid + "-" + strings.ReplaceAll(request, "/", "_") }

// globEscape escapes the characters filepath.Match treats specially.
func globEscape(s string) string {
	r := strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`)
	return r.Replace(s)
}
