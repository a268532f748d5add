#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and kube-scheduler of an
# older Kubernetes minor from the Go module proxy, for `make compat`: the
# extender's seed test against that control plane. The minor's tools module
# hack/compat/MINOR pins the patch. etcd, kubectl, kwok and kwok's stages
# are linked from the current tools (hack/cluster-tools.sh), so the result
# is a complete tools directory for GPUSHARE_CLUSTER_TOOLS. The current
# tools are read from GPUSHARE_CLUSTER_TOOLS (as `make` sets it).
# Usage: hack/compat-tools.sh MINOR [DIR]   e.g. v1.33
#   (DIR default: $HOME/.cache/gpushare/cluster-<patch of MINOR>)
# Prints the directory.
set -euo pipefail

minor=${1:?usage: hack/compat-tools.sh MINOR [DIR], MINOR one of hack/compat/*}
root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/hack/compat/$minor"
[[ -f "$mod/go.mod" ]] || { echo "no tools module $mod" >&2; exit 1; }
cd "$mod"
version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
dir=${2:-$HOME/.cache/gpushare/cluster-$version}
current=${GPUSHARE_CLUSTER_TOOLS:-$HOME/.cache/gpushare/cluster-v1.37.2}
[[ -x "$current/bin/etcd" ]] || { echo "no current tools in $current: run make cluster-tools" >&2; exit 1; }
mkdir -p "$dir/bin"

minor_number=${minor#v1.}
ldflags="-X k8s.io/component-base/version.gitVersion=$version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor_number"
echo "building kube-apiserver kube-controller-manager kube-scheduler $version" >&2
go build -ldflags "$ldflags" -o "$dir/bin/" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler

# etcd 3.6 serves Kubernetes 1.33 and later; kubectl and kwok talk to the
# API server through versions every minor here serves.
for b in etcd kubectl kwok; do
	ln -sfn "$(readlink -f "$current/bin/$b")" "$dir/bin/$b"
done
ln -sfn "$current/stages" "$dir/stages"
echo "$dir"
