#!/usr/bin/env bash
# Runs each fuzz target of the packages given for FUZZTIME (a duration),
# from the seed corpus, for `make fuzz`.
#
# Go 1.26's fuzz coordinator can fail a target with "context deadline
# exceeded" at the end of a -fuzztime duration on a busy machine, having
# found nothing (golang/go#75804, fixed in Go 1.27): it races its own
# deadline. A target that fails that way and wrote no failing input under
# testdata/fuzz is run once more for as many inputs as the failed run
# tried (-fuzztime Nx), which sets no deadline to race; any other
# failure, or a second one, fails.
# Usage: FUZZTIME=10s [FUZZMINIMIZETIME=100x] hack/fuzz.sh PACKAGE...
set -euo pipefail
go=${GO:-go}
fuzztime=${FUZZTIME:-10s}
# Each input that finds new coverage is first minimised, for up to 60 s
# by default, and the target is not fuzzed meanwhile: FuzzRecords, whose
# inputs are three JSON records, ran 5 inputs in 10 s that way, against
# about 8000 with the minimising held to 100 runs per input.
minimize=${FUZZMINIMIZETIME:-100x}
# Inputs saved by earlier runs would be replayed first, and their number
# grows with every run: past FUZZTIME, go test fails.
"$go" clean -fuzzcache
for pkg in "$@"; do
	for target in $("$go" test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
		budget=$fuzztime
		for try in 1 2; do
			echo "fuzz $pkg $target ($budget)"
			corpus="$pkg/testdata/fuzz/$target"
			before=$(find "$corpus" -type f 2>/dev/null | sort || true)
			log=$(mktemp)
			if "$go" test -run '^$' -fuzz "^$target$" -fuzztime "$budget" -fuzzminimizetime "$minimize" "$pkg" 2>&1 | tee "$log"; then
				rm -f "$log"
				break
			fi
			after=$(find "$corpus" -type f 2>/dev/null | sort || true)
			if [[ $try == 1 && $before == "$after" ]] && grep -q '^    context deadline exceeded$' "$log"; then
				execs=$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || true)
				budget="$(( ${execs:-0} > 1000 ? ${execs:-0} : 1000 ))x"
				echo "fuzz $pkg $target: the coordinator's deadline race (golang/go#75804), no failing input: once more, for $budget"
				rm -f "$log"
				continue
			fi
			rm -f "$log"
			exit 1
		done
	done
done
