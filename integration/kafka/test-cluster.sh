#!/usr/bin/env bash
# Runs the cluster chaos pass (TestChaosClusterFaults in integration/chaos)
# against a three-broker Apache Kafka cluster (integration/kafka/cluster.sh,
# transaction version 2): processors SIGKILLed and frozen while brokers are
# killed, frozen and re-elected and every processor connection runs through
# a fault-injecting proxy. The cluster is stopped afterwards, also when the
# test fails or this script is killed (the cluster's owner-pid watchdog).
# Exits non-zero on failure.
#
# Environment:
#   GO                      go binary (default: go)
#   CLUSTER_CHAOS_RECORDS   records of the run (default 200000)
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
log="$dir/go-test.log"
status=0
if [[ -n "${CLUSTER_CHAOS_LOG:-}" ]]; then
  trap 'cp "$log" "$CLUSTER_CHAOS_LOG" 2>/dev/null || true; cleanup' EXIT INT TERM
fi
# shellcheck disable=SC2086
KAFKA_BROKERS="$brokers" KAFKA_CLUSTER="$dir" CHAOS_RECORDS="${CLUSTER_CHAOS_RECORDS:-200000}" \
  "$GO" test $GOTEST_FLAGS -count=1 -v -timeout 30m -run '^TestChaosClusterFaults$' ./integration/chaos/ >"$log" 2>&1 || status=$?
if ((status == 0)) && grep -q '^--- PASS: TestChaosClusterFaults' "$log"; then
  grep -E '^(--- |ok |FAIL|PASS$|chaos:)|: chaos: (broker (kill|freeze)|election) ' "$log" || true
  # Why each processor that ended by itself ended (the error Run returned).
  grep -E 'exited by itself|run failed' "$log" || true
  echo "==> cluster chaos passed against Apache Kafka $KAFKA_VERSION ($((SECONDS - began))s)"
else
  cat "$log"
  # The brokers' side of the story.
  for n in "$dir"/node-*; do
    echo "--- $n/kafka.log (last 30 lines)"
    tail -n 30 "$n/kafka.log" || true
  done
  echo "==> cluster chaos FAILED against Apache Kafka $KAFKA_VERSION ($((SECONDS - began))s)"
  exit 1
fi
