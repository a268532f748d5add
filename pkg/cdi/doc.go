// Package cdi holds the CDI side of the node daemon: the name of the CDI
// device that Allocate hands each container (a claim, a hash of its
// device IDs), the spec written for a claim once its container is known
// (the GPUs' UUIDs, the shares, the MPS client environment and mounts),
// and the sweep that removes the specs no container can need any more.
//
// Specs are written in the CDI module's own types (specs-go), staged in
// a file runtimes do not read and renamed into place by the caller, under
// the lock the sweep removes under.
package cdi
