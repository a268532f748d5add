#!/usr/bin/env bash
# Makes release VERSION (vX.Y.Z, or vX.Y.Z-PRERELEASE) of gpushare into
# OUT (default bin/release/); `make release VERSION=vX.Y.Z` runs it:
#   - the three images, tagged VERSION (make images: bin/images/);
#   - the chart, gpushare-X.Y.Z.tgz: chart version X.Y.Z and appVersion
#     VERSION, so that its default image.tag is the images' tag
#     (charts/gpushare/Chart.yaml is left as it is);
#   - the kubectl plugin, one kubectl-inspect-gpushare_OS_ARCH.tar.gz per
#     platform of its krew manifest, each with a .sha256 file
#     (sha256sum -c reads it), and inspect-gpushare.yaml: the krew
#     manifest with VERSION in its version and URIs and each archive's
#     sha256.
# RELEASE_IMAGES=0 leaves the images out; KREW_MANIFEST names another
# manifest to fill in (the tests use both).
# Usage: HELM=helm hack/release.sh VERSION [OUT]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?usage: hack/release.sh VERSION [OUT]}
out=${2:-$root/bin/release}
helm=${HELM:-helm}
manifest=${KREW_MANIFEST:-$root/cmd/kubectl-inspect-gpushare/plugin.yaml}

if [[ ! $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "release: VERSION $version is not vX.Y.Z (or vX.Y.Z-PRERELEASE)" >&2
	exit 1
fi
if [[ $version == *-dirty || -n $(git -C "$root" status --porcelain --untracked-files=no) ]]; then
	if [[ ${RELEASE_DIRTY:-0} != 1 ]]; then
		echo "release: tracked files have uncommitted changes (RELEASE_DIRTY=1 to release anyway)" >&2
		exit 1
	fi
fi

mkdir -p "$out"
if [[ ${RELEASE_IMAGES:-1} != 0 ]]; then
	"${MAKE:-make}" -C "$root" images VERSION="$version"
fi

# The chart.
"$helm" package "$root/charts/gpushare" --version "${version#v}" --app-version "$version" --destination "$out"

# The kubectl plugin: an archive per platform the manifest names.
commit=$(git -C "$root" rev-parse HEAD)
mtime=$(git -C "$root" log -1 --format=%ct)
ldflags="-X github.com/gpushare/gpushare/pkg/version.version=$version -X github.com/gpushare/gpushare/pkg/version.commit=$commit"
archives=$(grep -oE 'kubectl-inspect-gpushare_[a-z0-9]+_[a-z0-9]+\.tar\.gz' "$manifest" | sort -u)
if [[ -z $archives ]]; then
	echo "release: $manifest names no kubectl-inspect-gpushare_OS_ARCH.tar.gz" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for archive in $archives; do
	platform=${archive#kubectl-inspect-gpushare_}
	platform=${platform%.tar.gz}
	goos=${platform%_*} goarch=${platform#*_}
	mkdir -p "$tmp/$platform"
	(cd "$root" && CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -ldflags "$ldflags" \
		-o "$tmp/$platform/kubectl-inspect-gpushare" ./cmd/kubectl-inspect-gpushare)
	# Byte for byte the same from the same commit.
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
		-C "$tmp/$platform" -cf - kubectl-inspect-gpushare | gzip -n >"$out/$archive"
	(cd "$out" && sha256sum "$archive" >"$archive.sha256")
	echo "$out/$archive"
done

# The krew manifest: VERSION, each URI's archive's sha256 on the line
# after it, and the source tree's note on unreleased manifests left out.
awk -v version="$version" -v dir="$out" '
	/^# Each release fills in/ || /^# until then install from source/ { next }
	/^  version: / { sub(/: .*/, ": " version) }
	/^ *uri: / {
		sub(/\/download\/[^\/]+\//, "/download/" version "/")
		n = split($0, parts, "/")
		archive = parts[n]
	}
	/^ *sha256: / && archive != "" {
		file = dir "/" archive ".sha256"
		if ((getline line < file) <= 0) { print "release: no " file > "/dev/stderr"; exit 1 }
		close(file)
		split(line, sum, " ")
		sub(/sha256: .*/, "sha256: \"" sum[1] "\"")
		archive = ""
	}
	{ print }
' "$manifest" >"$out/inspect-gpushare.yaml"
echo "$out/inspect-gpushare.yaml"
