// Package extender is gpushare's HTTP scheduler extender, for clusters
// that keep stock kube-scheduler (the way in of seeds 001-004). It serves
// the filter, prioritize and bind verbs under a URL prefix, over the same
// cache and core as the scheduler plugin; it has no scheduling logic of
// its own.
//
// Bind records the allocation on the pod and then binds it. Placing on the
// node and booking in the cache happen under one lock, so concurrent binds
// never book the same GPU share twice.
package extender
