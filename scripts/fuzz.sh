#!/usr/bin/env bash
# Runs every fuzz target of the repository's modules (func FuzzXxx in a
# *_test.go file; go.work puts the nested modules in reach of the root)
# for a bounded time each: FUZZTIME (default 5s, any -fuzztime value),
# FUZZPARALLEL workers (default 2). The seed corpora are committed under
# each package's testdata/fuzz/FuzzXxx; a failing input the fuzzer finds
# is written there too, and the script exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-5s}
FUZZPARALLEL=${FUZZPARALLEL:-2}

targets=$(grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*(f \*testing.F)' . |
	sed -E 's#^\./(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*).*#\1 \2#' | sort -u)
if [ -z "$targets" ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi
# boundary_race OUT: true if a failed run is Go's own race at the end of a
# -fuzztime window (go.dev/issue/75804, fixed in Go 1.27): the target fails
# with a bare "context deadline exceeded" (after whatever the target logged
# with t.Log, which go test prints for a failed target), no failing input
# was written, nothing panicked and no seed corpus entry failed. A failure
# of the target's own checks while fuzzing always writes its input. Any
# other failure is a finding.
boundary_race() {
	grep -qE '^[[:space:]]+context deadline exceeded$' <<<"$1" &&
		! grep -q 'Failing input written to' <<<"$1" &&
		! grep -q 'failure while testing seed corpus entry' <<<"$1" &&
		! grep -qE 'panic:|Error Trace:' <<<"$1"
}
count=0
while read -r pkg name; do
	echo "fuzz: ./$pkg $name for $FUZZTIME"
	start=$(date +%s)
	fuzz() { $GO test "./$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -parallel "$FUZZPARALLEL" 2>&1; }
	ok=1
	out=$(fuzz) || ok=0
	if ((!ok)) && boundary_race "$out"; then
		echo "fuzz: ./$pkg $name ended in Go's fuzztime race (go.dev/issue/75804; no input written); running it once more"
		ok=1
		out=$(fuzz) || ok=0
	fi
	if ((!ok)); then
		echo "$out"
		echo "fuzz: FAIL ./$pkg $name (the failing input is in $pkg/testdata/fuzz/$name)" >&2
		exit 1
	fi
	execs=$(echo "$out" | grep -o 'execs: [0-9]*' | tail -1 || true)
	echo "fuzz: ok   ./$pkg $name $((  $(date +%s) - start ))s ${execs}"
	count=$((count + 1))
done <<<"$targets"
echo "fuzz: $count targets passed ($FUZZTIME each)"
