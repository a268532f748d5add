#!/usr/bin/env bash
# gpu-check: the node daemon's GPU code on this machine's GPUs, without
# Kubernetes (docs/gpu-check.md). Builds the gpucheck tests, runs them
# within the budget, and prints their report as one JSON line on stdout;
# everything else goes to stderr. Exits non-zero when a check fails.
#
#   hack/gpu-check.sh [auto|nvml|fake]
#
# nvml: the machine's GPUs, driver, nvidia-smi and MPS. fake: go-nvml's
# mock NVML and stand-ins for nvidia-smi, the MPS control daemon and CUDA
# processes (CI). auto (the default): nvml where an NVIDIA driver is
# installed (nvidia-smi on PATH or /dev/nvidiactl), else fake.
# GPU_CHECK_BUDGET is the whole run's limit in seconds (480).
# GPU_CHECK_BINARY names checks built beforehand (make gpu-check-build)
# for a GPU machine without Go: then nothing is built here.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-auto}
budget=${GPU_CHECK_BUDGET:-480}
export CGO_CFLAGS=${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}
export CGO_ENABLED=1

# fail prints the report of a run that produced none, and exits.
fail() {
	local msg=${1//\\/\\\\}
	msg=${msg//\"/\\\"}
	printf '{"check":"gpushare gpu-check","mode":"%s","pass":false,"errors":["%s"]}\n' "$mode" "$msg"
	exit 1
}

case $mode in
auto)
	if command -v nvidia-smi >/dev/null || [ -e /dev/nvidiactl ]; then
		mode=nvml
	else
		mode=fake
		echo "gpu-check: no NVIDIA driver here (no nvidia-smi, no /dev/nvidiactl): checking against the fake" >&2
	fi
	;;
nvml | fake) ;;
*) fail "unknown mode $mode: want auto, nvml or fake" ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${GPU_CHECK_BINARY:-}" ]; then
	[ -x "$GPU_CHECK_BINARY" ] || fail "GPU_CHECK_BINARY=$GPU_CHECK_BINARY is not an executable file"
	echo "gpu-check ($mode): running the checks built beforehand ($GPU_CHECK_BINARY)" >&2
	cp "$GPU_CHECK_BINARY" "$work/gpucheck.test"
else
	echo "gpu-check ($mode): building the checks" >&2
	# -trimpath with cgo, as the gpushare-node image is built (hack/image):
	# make test compiles the packages the two have in common once.
	if ! go test -c -trimpath -tags gpucheck -o "$work/gpucheck.test" ./test/gpucheck >&2; then
		fail "building the checks (go test -c -trimpath -tags gpucheck ./test/gpucheck) failed: see stderr"
	fi
fi
left=$((budget - SECONDS))
if [ "$left" -lt 60 ]; then
	fail "building the checks took ${SECONDS}s of the ${budget}s budget"
fi
echo "gpu-check ($mode): running the checks (${left}s left)" >&2
rc=0
(cd "$work" && GPUSHARE_GPU_CHECK=$mode GPUSHARE_GPU_CHECK_REPORT="$work/report.json" \
	timeout --kill-after=10 "$((left + 5))" ./gpucheck.test -test.v -test.count=1 -test.timeout="${left}s") >&2 || rc=$?
if [ ! -s "$work/report.json" ]; then
	fail "the checks exited with status $rc without a report: see stderr"
fi
cat "$work/report.json"
exit "$rc"
