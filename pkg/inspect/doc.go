// Package inspect builds what `kubectl inspect gpushare` shows from a
// snapshot of Nodes, Pods and Events, and renders it: the cluster table,
// the per-GPU details (-d) and one pod's placement.
//
// It makes no API calls. Records and inventories are read by the
// scheduler's own cache (pkg/cache), never interpreted a second way: a
// record the cache books nothing for is shown as refused, with the
// cache's reason. Given the scheduler's resource model (Input.Requests)
// records are also checked against their pods' specs, as the scheduler
// checks them.
package inspect
