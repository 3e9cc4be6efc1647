#!/usr/bin/env bash
# Runs the test suite against real Apache Kafka, twice: on a broker formatted
# with transaction version 2 (the Kafka 4.x default) and on one formatted with
# transaction version 1, since the two differ in epoch handling. Each broker
# is started on free 127.0.0.1 ports and stopped afterwards, also when a test
# fails. Exits non-zero on any failure.
#
# Environment:
#   GO                    go binary (default: go)
#   KAFKA_TEST_VERSIONS   transaction versions to run (default: "2 1")
#   CHAOS_RECORDS         records of the chaos run on the TV2 broker (default 100000)
#   CHAOS_STANDBY         standby replicas in the chaos run on the TV2 broker (default 1)
#   GOTEST_FLAGS          extra go test flags (default: -race)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
GO="${GO:-go}"
KAFKA="$SCRIPT_DIR/kafka.sh"
VERSIONS="${KAFKA_TEST_VERSIONS:-2 1}"
GOTEST_FLAGS="${GOTEST_FLAGS:--race}"
# Every module's packages: the library's ./... and the test modules'.
PACKAGES="$(GO="$GO" bash "$ROOT/scripts/packages.sh")"

bash "$KAFKA" fetch
KAFKA_VERSION="$(bash "$KAFKA" version)"

workdirs=()
cleanup() {
  for d in "${workdirs[@]}"; do
    bash "$KAFKA" stop "$d" || true
    rm -rf "$d"
  done
}
trap cleanup EXIT INT TERM

cd "$ROOT"
failed=0
for tv in $VERSIONS; do
  dir="$(mktemp -d -t flechtwerk-kafka-XXXXXX)"
  workdirs+=("$dir")
  brokers="$(bash "$KAFKA" start "$dir" --transaction-version "$tv" --owner-pid $$)"
  echo "==> Apache Kafka $KAFKA_VERSION (KRaft, transaction.version=$tv) at $brokers"
  # The TV2 pass runs the long chaos run, with one standby replica per
  # task (warm restarts and cooperative rebalances are always on).
  chaos=20000 standby=0
  if [[ "$tv" == 2 ]]; then chaos="${CHAOS_RECORDS:-100000}" standby="${CHAOS_STANDBY:-1}"; fi
  log="$dir/go-test.log"
  # -v so the log shows every test that ran against this broker; the full
  # output is kept and printed on failure.
  # shellcheck disable=SC2086
  if KAFKA_BROKERS="$brokers" CHAOS_RECORDS="$chaos" CHAOS_STANDBY="$standby" "$GO" test $GOTEST_FLAGS -count=1 -v -timeout 20m $PACKAGES >"$log" 2>&1; then
    grep -E '^(--- |ok |FAIL|PASS$|chaos:|\s+[a-z_]+\.go:[0-9]+: broker: )' "$log" | grep -v ': broker: kfake' || true
    echo "==> transaction.version=$tv: all tests passed against Apache Kafka $KAFKA_VERSION"
  else
    cat "$log"
    echo "==> transaction.version=$tv: FAILED against Apache Kafka $KAFKA_VERSION"
    failed=1
  fi
  bash "$KAFKA" stop "$dir"
done
exit "$failed"
