// Package lease keeps a node daemon's Lease renewed, the heartbeat by
// which the scheduler tells a node whose gpushare-node stopped from one
// whose daemon runs, without writing the Node object every few seconds.
package lease
