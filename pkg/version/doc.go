// Package version tells which gpushare build a binary is, for the
// --version flag of every gpushare command.
//
// The version is the one the Go toolchain stamps into the binary from
// version control: the v* tag at HEAD, or else a pseudo-version such as
// v0.0.0-20261124101500-0123456789ab, with +dirty when the tree had
// uncommitted changes. A release build may set it instead:
//
//	go build -ldflags "-X github.com/gpushare/gpushare/pkg/version.version=v1.2.3" ./cmd/...
//
// and the commit likewise (…/pkg/version.commit=SHA) where the build has
// no version control information.
package version
