#!/usr/bin/env bash
# Runs the cluster chaos pass (TestChaosClusterFaults in integration/chaos)
# against a three-broker Apache Kafka cluster (integration/kafka/cluster.sh,
# transaction version 2): processors SIGKILLed and frozen while brokers are
# killed, frozen and re-elected and every processor connection runs through
# a fault-injecting proxy. The cluster is stopped afterwards, also when the
# test fails or this script is killed (the cluster's owner-pid watchdog).
# Exits non-zero on failure.
#
# It runs once per transaction mode, on the same cluster: a producer per
# task, then the shared-producer mode (runner.SharedProducer), the latter
# shorter (40000 records; one broker kill and one freeze, no election) to
# keep CI under 40 minutes.
#
# Environment:
#   GO                      go binary (default: go)
#   CLUSTER_CHAOS_MODES     modes to run (default "per-task shared")
#   CLUSTER_CHAOS_RECORDS   records of the per-task run (default 200000)
#   CLUSTER_CHAOS_SHARED_RECORDS
#                           records of the shared run (default 40000)
#   GOTEST_FLAGS            extra go test flags (default: none; the
#                           processors and the proxies are heavy enough)
#   CHAOS_*                 passed through (see integration/chaos/doc.go)
#   CLUSTER_CHAOS_LOG       file to keep the full go test log in (default:
#                           none; it is removed with the cluster)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
GO="${GO:-go}"
CLUSTER="$SCRIPT_DIR/cluster.sh"
GOTEST_FLAGS="${GOTEST_FLAGS:-}"

bash "$SCRIPT_DIR/kafka.sh" fetch
KAFKA_VERSION="$(bash "$SCRIPT_DIR/kafka.sh" version)"

dir="$(mktemp -d -t flechtwerk-cluster-XXXXXX)"
cleanup() {
  bash "$CLUSTER" stop "$dir" || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

cd "$ROOT"
began=$SECONDS
brokers="$(bash "$CLUSTER" start "$dir" --transaction-version 2 --owner-pid $$)"
echo "==> Apache Kafka $KAFKA_VERSION cluster (3 KRaft nodes, replication 3, min ISR 2) at $brokers, proxied $(cat "$dir/proxied")"
status=0
for mode in ${CLUSTER_CHAOS_MODES:-per-task shared}; do
  log="$dir/go-test-$mode.log"
  began=$SECONDS
  if [[ -n "${CLUSTER_CHAOS_LOG:-}" ]]; then
    trap 'cp "$log" "$CLUSTER_CHAOS_LOG" 2>/dev/null || true; cleanup' EXIT INT TERM
  fi
  records="${CLUSTER_CHAOS_RECORDS:-200000}" args="${CHAOS_PROCESSOR_ARGS:-}"
  extra=()
  if [[ "$mode" == shared ]]; then
    records="${CLUSTER_CHAOS_SHARED_RECORDS:-40000}" args="-shared-producer $args"
    extra=(CHAOS_BROKER_KILLS="${CHAOS_BROKER_KILLS:-1}" CHAOS_BROKER_FREEZES="${CHAOS_BROKER_FREEZES:-1}" CHAOS_ELECTIONS="${CHAOS_ELECTIONS:-0}" CHAOS_KILLS="${CHAOS_KILLS:-6}")
  fi
  echo "==> mode $mode"
  run=0
  env "${extra[@]}" KAFKA_BROKERS="$brokers" KAFKA_CLUSTER="$dir" CHAOS_RECORDS="$records" CHAOS_PROCESSOR_ARGS="$args" \
    "$GO" test $GOTEST_FLAGS -count=1 -v -timeout 30m -run '^TestChaosClusterFaults$' ./integration/chaos/ >"$log" 2>&1 || run=$?
  if ((run == 0)) && grep -q '^--- PASS: TestChaosClusterFaults' "$log"; then
    grep -E '^(--- |ok |FAIL|PASS$|chaos:)|: chaos: (broker (kill|freeze)|election) ' "$log" || true
    # Why each processor that ended by itself ended (the error Run returned).
    grep -E 'exited by itself|run failed' "$log" || true
    echo "==> cluster chaos ($mode) passed against Apache Kafka $KAFKA_VERSION ($((SECONDS - began))s)"
  else
    cat "$log"
    # The brokers' side of the story.
    for n in "$dir"/node-*; do
      echo "--- $n/kafka.log (last 30 lines)"
      tail -n 30 "$n/kafka.log" || true
    done
    echo "==> cluster chaos ($mode) FAILED against Apache Kafka $KAFKA_VERSION ($((SECONDS - began))s)"
    status=1
    break
  fi
done
exit "$status"
