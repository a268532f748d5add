// Package decision is what the scheduler plugin and the extender decide
// alike, in their own protocols' terms: the request a pod makes of the
// allocation core, the order of the nodes that fit, the score of a rank,
// and the reason a node does not fit. Keeping it in one place keeps the
// two ways into kube-scheduler choosing the same nodes for the same
// reasons. It imports no kube-scheduler code.
package decision
