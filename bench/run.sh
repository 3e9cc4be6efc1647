#!/usr/bin/env bash
# Runs the eosbench command (docs/performance.md) twice: against a single-node
# Apache Kafka 4.x broker that this script starts (and stops on exit, also
# after a failure), then against the embedded broker (kfake) in-process.
# The rows (bench/doc.go): (a) the pipelined plain pipe, the limit;
# (a-sync) the plain loop that waits after every poll; (b) the
# GroupTransactSession loop; (c) the runner; (d) Kafka Streams.
#
# Environment:
#   GO                        go binary (default: go)
#   BENCH_RECORDS             input records per drain row on Kafka (default 1000000)
#   BENCH_KFAKE_RECORDS       the same on kfake (default 100000; 0 skips kfake)
#   BENCH_LATENCY             paced-producer duration per latency row (default 15s; 0s skips)
#   BENCH_RESTORE_RECORDS     records of the restore benchmark on Kafka (default 1000000)
#   BENCH_KFAKE_RESTORE_RECORDS  the same on kfake (default 100000)
#   BENCH_OUT                 directory for the binary, the CPU profiles and the
#                             reports (default: a new temporary directory, kept)
#   BENCH_FLAGS               extra eosbench flags for both runs
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
GO="${GO:-go}"
RECORDS="${BENCH_RECORDS:-1000000}"
KFAKE_RECORDS="${BENCH_KFAKE_RECORDS:-100000}"
LATENCY="${BENCH_LATENCY:-15s}"
RESTORE="${BENCH_RESTORE_RECORDS:-1000000}"
KFAKE_RESTORE="${BENCH_KFAKE_RESTORE_RECORDS:-100000}"
OUT="${BENCH_OUT:-$(mktemp -d -t flechtwerk-bench-XXXXXX)}"
mkdir -p "$OUT"
# shellcheck disable=SC2206
EXTRA=(${BENCH_FLAGS:-})

cd "$ROOT"
"$GO" build -o "$OUT/eosbench" ./bench/cmd/eosbench

# shellcheck source=kafka.sh
source "$SCRIPT_DIR/kafka.sh"
bench_kafka_start bench
echo "==> Apache Kafka $KAFKA_VERSION at $BROKERS (pid $KAFKA_PID); output in $OUT"
"$OUT/eosbench" -brokers "$BROKERS" -broker-pid "$KAFKA_PID" -label "Apache Kafka $KAFKA_VERSION" \
  -records "$RECORDS" -latency-duration "$LATENCY" -restore-records "$RESTORE" \
  -cpuprofile "$OUT/runner-cpu.pprof" -latency-cpuprofile "$OUT/runner-latency-cpu.pprof" \
  "${EXTRA[@]}" | tee "$OUT/kafka.txt"
bench_kafka_stop

if [[ "$KFAKE_RECORDS" != 0 ]]; then
  echo "==> embedded broker (kfake, in this process: CPU here includes the broker)"
  "$OUT/eosbench" -label "kfake (embedded, in-process)" \
    -records "$KFAKE_RECORDS" -latency-duration "$LATENCY" -restore-records "$KFAKE_RESTORE" \
    "${EXTRA[@]}" | tee "$OUT/kfake.txt"
fi
echo "==> reports and CPU profile in $OUT"
