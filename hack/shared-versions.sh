#!/usr/bin/env bash
# Checks that every module whose packages both gpushare's commands and the
# control plane's (hack/tools: the Kubernetes commands, etcd and kwok)
# compile is at one version in both modules. A package is then compiled
# once for both: a cold make demo compiles k8s.io/kubernetes's scheduler,
# client-go and the rest for gpushare-scheduler and reuses them for
# kube-scheduler and the other commands. One module at another version
# (a go.yaml.in/yaml/v3 patch release was one) recompiles every package
# above it: minutes of a cold build. Sharing also needs the same build
# flags: no -race on one side only, and CGO_ENABLED=0 and -trimpath on
# both (the Makefile's SHARED_BUILD, which hack/cluster-tools.sh repeats).
# Usage: hack/shared-versions.sh   (exit 1 and the modules that differ)
set -euo pipefail
# join needs sort's order, byte by byte.
export LC_ALL=C
root=$(cd "$(dirname "$0")/.." && pwd)

# module path, then where its packages come from: path@version, or a
# replacement's path@version or directory
modules() {
	go list -deps -f '{{with .Module}}{{.Path}} {{with .Replace}}{{if .Version}}{{.Path}}@{{.Version}}{{else}}{{.Dir}}{{end}}{{else}}{{.Path}}@{{.Version}}{{end}}{{end}}' "$@" | sort -u
}
# Every package of the main module and its tests: make test compiles the
# tests' dependencies without -race after the control plane, and shares
# them too.
main=$(cd "$root" && modules -test ./...)
# The commands hack/cluster-tools.sh builds from the tools module, as
# hack/tools/tools.go lists them (-e: Go refuses to import a command, but
# lists the imports).
tools=$(cd "$root/hack/tools" && modules $(go list -e -tags tools -f '{{join .Imports " "}}' .))

differ=$(join <(echo "$main") <(echo "$tools") | awk '$2 != $3 {printf "  %s: %s in the main module, %s in hack/tools\n", $1, $2, $3}')
if [[ -n $differ ]]; then
	echo "modules both builds compile, at two versions (each package above them is compiled twice in a cold build):" >&2
	echo "$differ" >&2
	echo "align them: go get MODULE@VERSION in one module, then go mod tidy" >&2
	exit 1
fi
# The flags: the Makefile's SHARED_BUILD and hack/cluster-tools.sh's
# shared_build set the same environment.
# As make expands SHARED_BUILD in a recipe: its variables, and $$ as $.
make_flags=$(make -s -C "$root" --no-print-directory --eval 'print-shared-build: ; @echo '"'"'$(SHARED_BUILD)'"'"'' print-shared-build)
script_flags=$(sed -n 's/^shared_build() { \(.*\) "\$@"; }$/\1/p' "$root/hack/cluster-tools.sh")
if [[ -z $make_flags || $make_flags != "$script_flags" ]]; then
	echo "the Makefile's SHARED_BUILD ($make_flags) and hack/cluster-tools.sh's shared_build ($script_flags) differ:" \
		"gpushare's commands and the control plane would compile their common packages twice" >&2
	exit 1
fi
echo "shared modules: $(join <(echo "$main") <(echo "$tools") | wc -l), all at one version; shared build flags: $make_flags"
