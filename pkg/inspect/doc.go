// Package inspect builds what `kubectl inspect gpushare` shows from a
// snapshot of Nodes, Pods and Events, and renders it: the cluster table,
// the per-GPU details (-d) and one pod's placement.
//
// It makes no API calls. Records and inventories are read by the
// scheduler's own cache (pkg/cache), so a record the scheduler books
// nothing for is shown as refused, with the cache's reason, never
// interpreted a second way.
package inspect
