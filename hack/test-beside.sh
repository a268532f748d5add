#!/usr/bin/env bash
# Runs make targets beside other make targets, for make test: the first
# list (the checks beside) as one background make at the lowest CPU
# priority, the second as a make in the foreground.
#
# The foreground targets leave part of a small machine's CPU idle: the
# integration, chart and real node tests wait much of their time (a
# control plane starting, a lease, a kubelet), and builds have stretches
# one compile long. The checks beside them (lint, the GPU check against
# its fake, fuzzing, the images) only compute, and their figures do not
# depend on the time they are given: fuzzing, for one, tries a number of
# inputs per target (hack/fuzz.sh's FUZZTIME=inputs), not a duration. At
# nice 19 they take mostly what the foreground leaves, not all: on a cold
# 2-core machine the foreground's builds took up to a quarter longer
# beside them and its tests a tenth to a quarter, and the whole ran
# about a minute shorter than with the checks in line
# (docs/benchmarks.md, "Cold build and CI"): the machine was busy nearly
# all the time either way. They
# run with make -k: one failing does not skip the others. Their output
# is kept and printed once they end, after the foreground's; their
# failure fails make test as it would alone. If the foreground fails, or
# the script is signalled, the checks beside are stopped (what they
# printed so far is shown).
# Usage: MAKE=make hack/test-beside.sh BESIDE... -- TARGET...
# (either list may hold make variables, VAR=value)
set -euo pipefail
make=${MAKE:-make}
besides=()
while (($#)) && [[ $1 != -- ]]; do
	besides+=("$1")
	shift
done
if (($# < 2 || ${#besides[@]} == 0)); then
	echo "usage: MAKE=make $0 BESIDE... -- TARGET..." >&2
	exit 2
fi
shift
log=$(mktemp "${TMPDIR:-/tmp}/gpushare-beside.XXXXXX")
beside=
targets=
# stop ends both jobs, each with its process group (the commands make
# ran; processes that made groups of their own, as the test clusters'
# do, stop with the tests that started them), and shows what the checks
# beside printed. A signal arriving meanwhile is ignored: it would end
# the script before they are stopped.
stop() {
	trap '' INT TERM HUP QUIT
	local pid jobs
	jobs=$(jobs -p)
	for pid in $jobs $targets $beside; do
		kill -- -"$pid" 2>/dev/null || true
	done
	for pid in $jobs $targets $beside; do
		wait "$pid" 2>/dev/null || true
	done
	if [[ -s $log ]]; then
		echo "the output of the checks beside the tests (stopped, or ended):"
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
nice -n 19 "$make" --no-print-directory -k "${besides[@]}" </dev/null >"$log" 2>&1 &
beside=$!
echo "beside the tests, at the lowest CPU priority: ${besides[*]}; their output follows the tests'"
"$make" --no-print-directory "$@" </dev/null &
targets=$!
set +m
wait "$targets"
targets=
echo "waiting for the checks beside the tests: ${besides[*]}"
status=0
wait "$beside" || status=$?
beside=
cat "$log"
: >"$log"
if ((status != 0)); then
	echo "a check beside the tests failed (make exited $status): see above; each runs alone as make TARGET (${besides[*]})" >&2
fi
exit "$status"
