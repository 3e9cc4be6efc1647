#!/usr/bin/env bash
# Runs the recovery benchmarks of package runner in one go test run against
# a single-node Apache Kafka 4.x broker that this script starts (and stops
# on exit, also after a failure):
#   - BenchmarkRestartAfterKill: a SIGKILLed runner process started again,
#     warm (its state directory kept) and cold (removed): records replayed,
#     restore time, start to first committed output;
#   - BenchmarkStandbyFailoverKill: the owner of a task SIGKILLed, the task
#     taken over by the other process with and without a standby replica;
#   - BenchmarkJoinPause and BenchmarkLeavePause: the longest commit gap of
#     the tasks that do not move when an instance joins or leaves,
#     cooperative vs. eager.
#
# Environment:
#   GO                    go binary (default: go)
#   BENCH_STATE_KEYS      keys of 100 bytes in the benchmarked task's state (default 1000000)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
GO="${GO:-go}"
KEYS="${BENCH_STATE_KEYS:-1000000}"

cd "$ROOT"
# shellcheck source=kafka.sh
source "$SCRIPT_DIR/kafka.sh"
bench_kafka_start recovery
echo "==> Apache Kafka $KAFKA_VERSION at $BROKERS; $KEYS keys of 100 bytes per benchmarked task"
KAFKA_BROKERS="$BROKERS" "$GO" test ./runner/ -run '^$' -timeout 60m -benchtime 1x \
  -bench 'BenchmarkRestartAfterKill|BenchmarkStandbyFailoverKill|BenchmarkJoinPause|BenchmarkLeavePause' \
  -standby-keys "$KEYS" 2>&1 | grep -E '^(Benchmark|restart after|standby SIGKILL|PASS|FAIL|ok )|gap|: (cooperative|eager)'
