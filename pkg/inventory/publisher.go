package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/klog/v2"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

// Restores are at least minRestoreInterval apart. When the node was
// changed again less than twice the interval after the last restore,
// another writer is taken to be fighting the publisher, and the interval
// doubles, up to maxRestoreInterval; a calmer change resets it.
const (
	minRestoreInterval = time.Second
	maxRestoreInterval = 2 * time.Minute
)

// NodeSource returns the node as a watch of it last saw it, or nil while
// the watch has not seen it.
type NodeSource func() *corev1.Node

// Publisher writes a node's inventory, with the opt-in label, and keeps
// both there: whenever the watch shows the node holding anything else
// (another inventory, an invalid one, none, or no gpushare=true label),
// Run puts them back.
//
// The node's inventory is compared as the scheduler reads it: parsed by
// gpusharev1.ParseInventory and marshalled again, so that a value that
// differs only in formatting, key order or fields the scheduler ignores
// is left alone, and every difference the scheduler would see is not.
type Publisher struct {
	client  NodePatcher
	node    string
	current NodeSource
	changed chan struct{}

	mu sync.Mutex
	// want is the inventory the publisher keeps on the node, marshalled;
	// empty before the first Publish. wantGPUs counts its GPUs.
	want     string
	wantGPUs int
	// last is the inventory last written or found on the node, and
	// wroteRV the node's resourceVersion after the last write: a node
	// older than that, as the watch may still show it, is not compared.
	last    string
	wroteRV string
	// lastRestore is when Run last tried to put the node back, and
	// failed whether that failed; interval is the least time before it
	// tries again.
	lastRestore time.Time
	failed      bool
	interval    time.Duration

	// usageMu guards lastUsage, the live use last written on the node
	// (PublishUsage).
	usageMu   sync.Mutex
	lastUsage *gpusharev1.GPUUsage
}

// NewPublisher returns a Publisher of node's inventory through client.
// current shows the node as its watch sees it; with nil, or while it
// returns nil, Publish compares with its own last write, and Run does
// nothing.
func NewPublisher(client NodePatcher, node string, current NodeSource) *Publisher {
	if current == nil {
		current = func() *corev1.Node { return nil }
	}
	return &Publisher{client: client, node: node, current: current,
		changed: make(chan struct{}, 1), interval: minRestoreInterval}
}

// Publish validates inv and makes it the inventory the publisher keeps on
// the node. A new inventory is written at once unless the node already
// holds it. The same inventory again only has Run check the node, as it
// does after a failed write. The patch names only the node's own label
// and annotation.
func (p *Publisher) Publish(ctx context.Context, inv *gpusharev1.GPUInventory) error {
	value, err := gpusharev1.Marshal(inv)
	if err != nil {
		return err
	}
	if errs := gpusharev1.ValidateInventory(inv); len(errs) > 0 {
		return fmt.Errorf("GPU inventory of node %s: %w", p.node, errs.ToAggregate())
	}
	defer p.NodeChanged()
	p.mu.Lock()
	defer p.mu.Unlock()
	if value == p.want {
		return nil
	}
	p.want, p.wantGPUs = value, len(inv.GPUs)
	if n := p.current(); n != nil && !p.stale(n) {
		if p.compare(n).none() {
			p.last = value
			return nil
		}
	} else if value == p.last {
		return nil
	}
	return p.write(ctx)
}

// NodeChanged tells Run that the node changed. It does not block.
func (p *Publisher) NodeChanged() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// Run puts the published inventory and label back on the node whenever
// they differ there, until ctx ends. It checks the node at each
// NodeChanged, and after a restore it had to put off or that failed.
func (p *Publisher) Run(ctx context.Context) {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.changed:
		case <-retry:
		}
		retry = nil
		if wait := p.reconcile(ctx); wait > 0 {
			retry = time.After(wait)
		}
	}
}

// reconcile restores the node if it differs from what is published and
// the rate limit allows; it returns how long to wait before trying again,
// or 0.
func (p *Publisher) reconcile(ctx context.Context) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.want == "" {
		return 0
	}
	n := p.current()
	if n == nil || p.stale(n) {
		return 0
	}
	d := p.compare(n)
	if d.none() {
		return 0
	}
	logger := klog.FromContext(ctx)
	now := time.Now()
	if !p.lastRestore.IsZero() {
		next := p.lastRestore.Add(p.interval)
		if now.Before(next) {
			return next.Sub(now)
		}
		switch since := now.Sub(p.lastRestore); {
		case since >= 2*p.interval:
			p.interval = minRestoreInterval
		case p.interval < maxRestoreInterval:
			p.interval = min(2*p.interval, maxRestoreInterval)
			if !p.failed {
				logger.Info("Another writer keeps changing the node's GPU inventory; restoring it less often",
					"sinceLastRestore", since.Round(time.Millisecond), "interval", p.interval)
			}
		}
	}
	p.lastRestore = now
	kv := d.keysAndValues(p.wantGPUs)
	if p.last == p.want {
		logger.Info("Node's GPU inventory was changed by someone else; restoring it", kv...)
	} else {
		logger.Info("Publishing the node's GPU inventory again", kv...)
	}
	err := p.write(ctx)
	p.failed = err != nil
	if err != nil {
		logger.Error(err, "Restoring the node's GPU inventory", "retryIn", p.interval)
		return p.interval
	}
	return 0
}

// write patches the node with the label and p.want.
func (p *Publisher) write(ctx context.Context) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{gpusharev1.NodeLabel: "true"},
		"annotations": map[string]string{gpusharev1.InventoryAnnotation: p.want},
	}})
	if err != nil {
		return err
	}
	n, err := p.client.PatchNode(ctx, p.node, patch)
	if err != nil {
		return fmt.Errorf("publishing the GPU inventory of node %s: %w", p.node, err)
	}
	p.last = p.want
	if n != nil {
		p.wroteRV = n.ResourceVersion
	}
	return nil
}

// stale says whether n is older than the node after the last write.
// Resource versions that do not compare (not integers) are taken as
// current: the rate limit bounds what that costs.
func (p *Publisher) stale(n *corev1.Node) bool {
	if p.wroteRV == "" {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(n.ResourceVersion, p.wroteRV)
	return err == nil && c < 0
}

// difference is how a node differs from what the publisher keeps there.
type difference struct {
	// label is "absent" or "other" when the node's gpushare label is not
	// "true"; labelValue is its value then.
	label, labelValue string
	// inventory is "absent", "invalid" or "different" when the node's
	// inventory is not the published one; err says why an invalid one
	// is, gpus counts a different one's GPUs.
	inventory string
	err       error
	gpus      int
}

func (d difference) none() bool { return d.label == "" && d.inventory == "" }

func (d difference) keysAndValues(publishedGPUs int) []any {
	var kv []any
	switch d.label {
	case "absent":
		kv = append(kv, "label", d.label)
	case "other":
		kv = append(kv, "label", d.label, "labelValue", d.labelValue)
	}
	switch d.inventory {
	case "absent":
		kv = append(kv, "inventory", d.inventory)
	case "invalid":
		kv = append(kv, "inventory", d.inventory, "inventoryError", d.err.Error())
	case "different":
		kv = append(kv, "inventory", d.inventory, "gpus", d.gpus, "publishedGPUs", publishedGPUs)
	}
	return kv
}

// compare says how n differs from the label and p.want.
func (p *Publisher) compare(n *corev1.Node) difference {
	var d difference
	if v, ok := n.Labels[gpusharev1.NodeLabel]; !ok {
		d.label = "absent"
	} else if v != "true" {
		d.label, d.labelValue = "other", v
	}
	v, ok := n.Annotations[gpusharev1.InventoryAnnotation]
	switch {
	case !ok:
		d.inventory = "absent"
	case v == p.want:
		// As written: no need to parse.
	default:
		inv, err := gpusharev1.ParseInventory(v)
		if err != nil {
			d.inventory, d.err = "invalid", err
			break
		}
		if canonical, err := gpusharev1.Marshal(inv); err != nil || canonical != p.want {
			d.inventory, d.gpus = "different", len(inv.GPUs)
		}
	}
	return d
}
