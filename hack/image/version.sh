#!/usr/bin/env bash
# Prints the version stamped into gpushare's binaries and used as its
# images' tag: the v* tag at HEAD, or else a Go pseudo-version of HEAD
# (v0.0.0-<commit time, UTC>-<12 digits of the commit>); -dirty is
# appended when tracked files have uncommitted changes. Every character
# is valid in an image tag.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! version=$(git describe --tags --exact-match --match 'v*' HEAD 2>/dev/null); then
	version="v0.0.0-$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S)-$(git rev-parse --short=12 HEAD)"
fi
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
	version+="-dirty"
fi
echo "$version"
