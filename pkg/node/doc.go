// Package node holds the node daemon's loop: it watches the GPUs' health
// once and passes each change to the inventory on the Node and to the
// device plugins, publishes the inventory once the plugins have
// registered with the kubelet (and on every change and resync), samples
// live use, renews the daemon's lease, and runs the device plugins and
// the sweep of stale CDI specs. cmd/gpushare-node reads flags and wires
// the parts; this package runs them.
package node
