// Package extender is gpushare's HTTP scheduler extender, for clusters
// that keep stock kube-scheduler (the way in of the Aliyun system and of
// the Elastic GPU Scheduler, both extenders). It serves the filter,
// prioritize and bind verbs under a URL prefix, over the same cache and
// core as the scheduler plugin, and decides (package decision) and binds
// (package binding) as the plugin does; it has no scheduling logic of its
// own, and imports no kube-scheduler code.
//
// Bind records the allocation on the pod and then binds it. Placing on the
// node and booking in the cache happen under one lock, so concurrent binds
// never book the same GPU share twice. Bind refuses what kube-scheduler
// would never ask: pods of other schedulers, and nodes the latest filter
// call for the pod did not pass.
//
// Whoever can call bind can place pods past every filter: Serving refuses
// to serve without client certificates (loopback too, unless told it may),
// and the handler
// bounds calls in flight and body sizes (429, 413) so that memory stays
// bounded.
package extender
