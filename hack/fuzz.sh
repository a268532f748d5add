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
#
# FUZZTIME=inputs gives each target a number of inputs instead, from the
# table below, as make test does: there fuzzing runs beside the other
# tests at the lowest CPU priority (hack/test-beside.sh), where a
# duration would try fewer inputs the busier the machine.
# Usage: FUZZTIME=10s|inputs [FUZZMINIMIZETIME=100x] hack/fuzz.sh [PACKAGE...]
# Without packages: every package of the module with a fuzz target.
set -euo pipefail
go=${GO:-go}
fuzztime=${FUZZTIME:-10s}

# The inputs each target tries with FUZZTIME=inputs: about what 10 s
# tries on a 2-core machine with nothing else running (the median of
# three runs, rounded down). A new target needs a line here.
declare -A inputs=(
	[FuzzLoad]=40000
	[FuzzParse]=90000
	[FuzzApply]=250000
	[FuzzInvariants]=550
	[FuzzRecords]=7000
	[FuzzHandler]=9000
	[FuzzScanArgs]=16000
	[FuzzDecodeListing]=60000
)

# The test files of the packages given, as lines of PACKAGE FILE...: the
# files their build constraints take.
testfiles() {
	"$go" list -f '{{$d := .Dir}}{{.ImportPath}}{{range .TestGoFiles}} {{$d}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$d}}/{{.}}{{end}}' "$@"
}
# The fuzz targets in the files given, read from them rather than listed
# by go test -list, which compiles the test binary once more to list them.
targets() {
	sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$@" | sort -u
}
if [[ $# == 0 ]]; then
	# As directories (./pkg/alloc): the corpus is read under them.
	mod=$("$go" list -m)
	pkgs=()
	while read -r pkg files; do
		# shellcheck disable=SC2086 # one word per file
		if [[ -n $files && -n $(targets $files) ]]; then pkgs+=("./${pkg#"$mod"/}"); fi
	done < <(testfiles ./...)
	if [[ ${#pkgs[@]} == 0 ]]; then
		echo "fuzz: no package has a fuzz target" >&2
		exit 1
	fi
	set -- "${pkgs[@]}"
fi
# Each input that finds new coverage is first minimised, for up to 60 s
# by default, and the target is not fuzzed meanwhile: FuzzRecords, whose
# inputs are three JSON records, ran 5 inputs in 10 s that way, against
# about 8000 with the minimising held to 100 runs per input.
minimize=${FUZZMINIMIZETIME:-100x}
# Inputs saved by earlier runs would be replayed first, and their number
# grows with every run: past FUZZTIME, go test fails.
"$go" clean -fuzzcache
for pkg in "$@"; do
	read -r _ files < <(testfiles "$pkg")
	# shellcheck disable=SC2086 # one word per file
	found=$(if [[ -n $files ]]; then targets $files; fi)
	if [[ -z $found ]]; then
		echo "fuzz: $pkg has no fuzz target" >&2
		exit 1
	fi
	for target in $found; do
		budget=$fuzztime
		if [[ $fuzztime == inputs ]]; then
			if [[ -z ${inputs[$target]:-} ]]; then
				echo "fuzz: $pkg $target has no number of inputs for FUZZTIME=inputs: add it to hack/fuzz.sh's table" >&2
				exit 1
			fi
			budget="${inputs[$target]}x"
		fi
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
