#!/usr/bin/env bash
# Runs make's lint target beside the make targets given, for make test.
#
# The integration, chart and real node tests spend much of their time
# waiting (a control plane starting, a lease, a kubelet), and leave about
# half of a small machine's CPU idle; lint (golangci-lint, and its build
# on a cold machine) only computes. Lint runs at the lowest CPU priority
# (nice 19), so it takes the CPU the tests leave and the tests, whose
# timing some of them check, lose next to nothing to it. Its output is
# kept and printed once it ends, after the tests; it fails make test as
# it would alone. If the tests fail, lint is stopped.
# Usage: MAKE=make hack/test-beside.sh TARGET...
set -euo pipefail
make=${MAKE:-make}
log=$(mktemp "${TMPDIR:-/tmp}/gpushare-lint.XXXXXX")
# Job control: the background job gets a process group of its own, so
# that stopping it stops golangci-lint and the go commands it runs.
set -m
nice -n 19 "$make" --no-print-directory lint >"$log" 2>&1 &
lint=$!
set +m
targets=
stop() {
	if [[ -n $targets ]]; then
		kill -- -"$targets" 2>/dev/null || true
		wait "$targets" 2>/dev/null || true
	fi
	kill -- -"$lint" 2>/dev/null || true
	wait "$lint" 2>/dev/null || true
	rm -f "$log"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
echo "lint runs beside the tests at the lowest CPU priority; its output follows them"
# The targets too in a background job of their own, waited for: a signal
# to this script is handled at once (a foreground command would delay the
# trap until it ended), and stops the targets, lint and all they started.
set -m
"$make" --no-print-directory "$@" &
targets=$!
set +m
wait "$targets"
targets=
echo "waiting for lint"
status=0
wait "$lint" || status=$?
trap - EXIT
cat "$log"
rm -f "$log"
if ((status != 0)); then
	echo "lint failed (exit status $status): see above; make lint runs it alone" >&2
fi
exit "$status"
