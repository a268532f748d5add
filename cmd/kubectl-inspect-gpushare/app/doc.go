// Package app is the command `kubectl inspect gpushare`: its flags, the
// paged lists of nodes and pods, and the view it writes with pkg/inspect.
// It is a package of its own so that the demo and the benchmark run it
// in-process.
package app
