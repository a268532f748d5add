#!/usr/bin/env bash
# Builds Kueue, the queue and quota manager users pair gpushare with, from
# the Go module proxy into DIR, with what installing it takes: its CRDs
# (DIR/crds) and its admission webhooks (DIR/webhooks.yaml), both from the
# same module.
# Usage: hack/kueue.sh VERSION DIR
set -euo pipefail

version=$1
dir=$2
tmp="$dir.tmp"
rm -rf "$tmp"
mkdir -p "$tmp/crds"
echo "building kueue $version" >&2
# Outside any module: go install and go mod download take the version
# named here, with Kueue's own go.mod.
cd "$(mktemp -d)"
# No DWARF, as the Makefile's NODWARF: a fifth less compiling, the same code.
GOBIN="$tmp" GOFLAGS="-mod=mod -gcflags=all=-dwarf=false" go install -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$version"
src=$(go mod download -json "sigs.k8s.io/kueue@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z "$src" || ! -d "$src/config/components/crd/bases" ]]; then
	echo "kueue $version: no CRDs in the module's source ($src)" >&2
	exit 1
fi
cp "$src"/config/components/crd/bases/*.yaml "$tmp/crds/"
cp "$src/config/components/webhook/manifests.yaml" "$tmp/webhooks.yaml"
chmod -R u+w "$tmp"
rm -rf "$dir"
mv "$tmp" "$dir"
