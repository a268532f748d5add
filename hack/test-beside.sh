#!/usr/bin/env bash
# Runs make's lint target beside the make targets given, for make test.
#
# The targets leave part of a small machine's CPU idle: the integration,
# chart and real node tests wait much of their time (a control plane
# starting, a lease, a kubelet), and builds have stretches one compile
# long. Lint (golangci-lint, and its build on a cold machine) only
# computes. It runs at the lowest CPU priority (nice 19) and takes what
# the targets leave: on a cold 2-core machine it ended before the
# integration tests began, and the builds beside it took about a tenth
# longer than alone, against its 12 minutes alone. Its output is
# kept and printed once it ends, after the tests; it fails make test as
# it would alone. If the tests fail, or the script is signalled, lint is
# stopped (what it printed so far is shown).
# Usage: MAKE=make hack/test-beside.sh TARGET...
set -euo pipefail
make=${MAKE:-make}
log=$(mktemp "${TMPDIR:-/tmp}/gpushare-lint.XXXXXX")
lint=
targets=
# stop ends both jobs, each with its process group (the commands make
# ran; processes that made groups of their own, as the test clusters'
# do, stop with the tests that started them), and shows lint's output.
# A signal arriving meanwhile is ignored: it would end the script before
# lint is stopped.
stop() {
	trap '' INT TERM HUP QUIT
	local pid jobs
	jobs=$(jobs -p)
	for pid in $jobs $targets $lint; do
		kill -- -"$pid" 2>/dev/null || true
	done
	for pid in $jobs $targets $lint; do
		wait "$pid" 2>/dev/null || true
	done
	if [[ -s $log ]]; then
		echo "lint's output (lint was stopped, or had ended):"
		cat "$log"
	fi
	rm -f "$log"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 131' QUIT
trap 'exit 143' TERM HUP
# Job control: each job gets a process group of its own, stopped as one.
# The targets run as a job too, waited for, so that a signal to this
# script is handled at once (a foreground command would delay the trap
# until it ended). Neither reads the terminal.
set -m
nice -n 19 "$make" --no-print-directory lint </dev/null >"$log" 2>&1 &
lint=$!
echo "lint runs beside the tests at the lowest CPU priority; its output follows them"
"$make" --no-print-directory "$@" </dev/null &
targets=$!
set +m
wait "$targets"
targets=
echo "waiting for lint"
status=0
wait "$lint" || status=$?
lint=
cat "$log"
: >"$log"
if ((status != 0)); then
	echo "lint failed (exit status $status): see above; make lint runs it alone" >&2
fi
exit "$status"
