#!/usr/bin/env bash
# Compares the eosbench figures of two revisions on one Apache Kafka broker:
# builds bench/cmd/eosbench at REV (a git revision, in a temporary worktree)
# and at the work tree, then runs them in turn, REV first, PAIRS times each,
# against the same broker after one uncounted warm-up run of REV (a new
# broker's JVM is slow at first), and prints each run's drain and latency
# rows. The latency rows offer a fixed load, the same in every run.
# Compare the runs of one pair with each other: the machine's speed drifts
# between pairs.
#
# Usage: bench/compare.sh REV
#
# Environment:
#   GO             go binary (default: go)
#   PAIRS          runs of each binary (default 3)
#   COMPARE_FLAGS  eosbench flags of every run (default: 300k records, 10s
#                  latency rows at 10k records/s, no reference, restore or
#                  Kafka Streams rows)
#   BENCH_OUT      directory for the binaries and reports (default: a new
#                  temporary directory, kept)
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 REV" >&2; exit 2; }
REV="$1"
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
GO="${GO:-go}"
PAIRS="${PAIRS:-3}"
# shellcheck disable=SC2206
FLAGS=(${COMPARE_FLAGS:--records 300000 -latency-duration 10s -latency-rate 10000 -broker-warmup 5s -reference=false -restore-records 0 -streams=})
OUT="${BENCH_OUT:-$(mktemp -d -t flechtwerk-compare-XXXXXX)}"
mkdir -p "$OUT"

cd "$ROOT"
old="$(mktemp -d -t flechtwerk-compare-src-XXXXXX)"
git worktree add -q --detach "$old" "$REV"
cleanup_src() { git -C "$ROOT" worktree remove --force "$old" >/dev/null 2>&1 || true; }
(cd "$old" && if [[ -f go.work ]]; then export GOWORK="$old/go.work"; fi && "$GO" build -o "$OUT/eosbench-old" ./bench/cmd/eosbench)
cleanup_src
"$GO" build -o "$OUT/eosbench-new" ./bench/cmd/eosbench

# shellcheck source=kafka.sh
source "$SCRIPT_DIR/kafka.sh"
bench_kafka_start compare
echo "==> Apache Kafka $KAFKA_VERSION at $BROKERS; old = $REV, new = the work tree; output in $OUT"
echo "==> warm-up run (not counted)"
"$OUT/eosbench-old" -brokers "$BROKERS" "${FLAGS[@]}" >"$OUT/warmup.txt" 2>&1
for i in $(seq 1 "$PAIRS"); do
  for side in old new; do
    echo "==> pair $i: $side"
    "$OUT/eosbench-$side" -brokers "$BROKERS" -broker-pid "$KAFKA_PID" -label "Apache Kafka $KAFKA_VERSION ($side)" \
      "${FLAGS[@]}" >"$OUT/$side-$i.txt" 2>&1
    grep -E '^\s+\((a|a-sync|b|c)\)|ratios:' "$OUT/$side-$i.txt" | grep -v 'windows of' || true
  done
done
bench_kafka_stop
echo "==> reports in $OUT"
