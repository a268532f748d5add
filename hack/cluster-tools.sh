#!/usr/bin/env bash
# Builds the real control plane that gpushare's integration tests, benchmarks
# and demo run on, from the Go module proxy, into a cache outside the clone:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
#   the kubelet and kwok (from the tools module in hack/tools), and the
#   real node's container runtime: containerd, its runc shim and ctr,
#   runc and the CNI plugins bridge, host-local and loopback (each from
#   its own module).
# Usage: hack/cluster-tools.sh [DIR]   (default: $HOME/.cache/gpushare/cluster-v1.37.2)
# Prints the directory that holds bin/ and kwok's stage files.
set -euo pipefail

KUBE_VERSION=v1.37.2
CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.2
CNI_PLUGINS_VERSION=v1.10.0
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-${GPUSHARE_CLUSTER_TOOLS:-$HOME/.cache/gpushare/cluster-$KUBE_VERSION}}
mkdir -p "$dir/bin" "$dir/stages"
# Absolute: the builds run in hack/tools.
dir=$(cd "$dir" && pwd)

# The shared build (the Makefile's SHARED_BUILD): static, -trimpath and
# no DWARF, as the images' static commands are built. The Kubernetes
# commands, etcd and kwok then share their compiled packages with make
# demo-build, the integration tests and the images (hack/image). Without
# DWARF the compiler spends about a fifth less time, and writes the same
# code; the binaries below are linked without it anyway (-s -w).
shared_build() { CGO_ENABLED=0 GOFLAGS="-trimpath -gcflags=all=-dwarf=false ${GOFLAGS:-}" "$@"; }

ldflags="-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

# One go build for the Kubernetes commands and kwok: they share most of
# their packages, and one build links each while it compiles the rest. The
# tools module holds them at the versions gpushare's own commands use, so
# that what make demo-build compiled is not compiled again
# (hack/shared-versions.sh). No symbol table or DWARF (-s -w): the tests
# and the demo never debug them, and linking without them is much of a
# cold build's link time.
cd "$root/hack/tools"
KWOK_VERSION=$(go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
echo "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kubelet $KUBE_VERSION, kwok $KWOK_VERSION" >&2
# Earlier versions of this script left bin/kwok a link to kwok-VERSION,
# which compat clusters may still link to: go build would write through it
# where it copies its output instead of renaming it.
if [[ -L "$dir/bin/kwok" ]]; then rm -f "$dir/bin/kwok"; fi
shared_build go build -ldflags "$ldflags -s -w" -o "$dir/bin/" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet sigs.k8s.io/kwok/cmd/kwok
echo "building etcd" >&2
shared_build go build -ldflags "-s -w" -o "$dir/bin/etcd" go.etcd.io/etcd/server/v3

# The real node's runtime, each from its own module. runc needs
# cgo (its nsenter) and, for the seccomp profiles containerd asks for
# (seccompProfile: RuntimeDefault), libseccomp's headers: Debian's
# libseccomp-dev, installed here when missing. The CNI plugins go to cni/,
# the directory containerd is told to look in.
install() { # install VERSION DIR TAGS PACKAGE...
	local version=$1 out=$2 tags=$3 stamp
	shift 3
	stamp="$out/.$(basename "$1")-$version"
	[[ -e $stamp ]] && return
	echo "building $* $version" >&2
	mkdir -p "$out"
	GOBIN="$out" GOFLAGS="-mod=mod -gcflags=all=-dwarf=false" go install -ldflags "-s -w" -tags "$tags" "${@/%/@$version}"
	touch "$stamp"
}
if ! pkg-config --exists libseccomp 2>/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
	echo "installing libseccomp-dev and pkg-config (Debian) for runc" >&2
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev pkg-config >&2
fi
if pkg-config --exists libseccomp 2>/dev/null && command -v gcc >/dev/null; then
	install "$RUNC_VERSION" "$dir/bin" seccomp github.com/opencontainers/runc
else
	# Only the real node (make node-test) needs runc: the rest goes on.
	echo "warning: not building runc, which needs gcc and libseccomp's headers (Debian: libseccomp-dev pkg-config);" \
		"the real node (make node-test) cannot start without it" >&2
fi
install "$CONTAINERD_VERSION" "$dir/bin" "" github.com/containerd/containerd/v2/cmd/containerd \
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr
install "$CNI_PLUGINS_VERSION" "$dir/cni" "" github.com/containernetworking/plugins/plugins/main/bridge \
	github.com/containernetworking/plugins/plugins/ipam/host-local github.com/containernetworking/plugins/plugins/main/loopback
# kwok needs stages (node heartbeat, pod lifecycle) or it exits "no stages found".
kwokdir=$(cd "$root/hack/tools" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
stages="$dir/stages/kwok-stages.yaml"
: >"$stages.tmp"
for stage in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
	{ echo '---'; cat "$kwokdir/kustomize/stage/$stage.yaml"; } >>"$stages.tmp"
done
mv "$stages.tmp" "$stages"
echo "$dir"
