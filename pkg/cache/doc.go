// Package cache is the scheduler's view of gpushare nodes and of the GPUs
// pods hold. Informers feed it nodes (their GPU inventory) and pods (their
// allocation records); the scheduler plugin and the extender add assumed
// placements between choosing a node and recording the choice on the pod.
//
// The pod records are the truth: a cache rebuilt from the apiserver after a
// restart books exactly what the records say, so a restarted scheduler
// never hands out a GPU share twice. Pods that ended (Succeeded, Failed) or
// were deleted release their GPUs.
package cache
