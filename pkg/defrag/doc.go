// Package defrag says which running pods a defragmentation plan
// (alloc.Placer.PlanDefrag) may move to make room for a pod that waits
// only because free GPU memory is scattered, and whether their disruption
// budgets let a plan move them. It is the Kubernetes side of the rules;
// the core plans on what it is given.
//
// A pod may move when all hold:
//
//   - it opts in: the label gpushare.io/movable=true on the pod or on its
//     namespace;
//   - a controller recreates it: its controller owner is a ReplicaSet, a
//     StatefulSet or a Job;
//   - its priority is not above the waiting pod's;
//   - it is running, bound, and not being deleted.
//
// A plan may move no more of the pods a PodDisruptionBudget selects than
// the budget's disruptionsAllowed.
//
// A Mover makes the plans of one scheduler profile when its PostFilter
// asks (Consider), holds their room in the scheduler's cache and evicts
// the pods they move; a Loop, which the scheduler's main runs, follows
// every Mover's plans to their end.
package defrag
