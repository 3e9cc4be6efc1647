#!/usr/bin/env bash
# Runs the MQTT bridge tests against a throw-away Mosquitto 2 broker
# started by mosquitto.sh (installing Mosquitto from the system's packages
# when it is missing), selected by MQTT_BROKER, and stops it afterwards,
# also when a test fails. Kafka stays the embedded broker unless
# KAFKA_BROKERS is set. Exits non-zero on any failure.
#
# Environment:
#   GO                  go binary (default: go)
#   MQTT_TEST_PACKAGES  packages to test (default: ./mqttbridge/ ./examples/mqttbridge/)
#   GOTEST_FLAGS        extra go test flags (default: -race)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
GO="${GO:-go}"
MQ="$SCRIPT_DIR/mosquitto.sh"
PACKAGES="${MQTT_TEST_PACKAGES:-./mqttbridge/ ./examples/mqttbridge/}"
GOTEST_FLAGS="${GOTEST_FLAGS:--race}"

dir="$(mktemp -d -t flechtwerk-mqtt-XXXXXX)"
cleanup() {
  bash "$MQ" stop "$dir" || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

url="$(bash "$MQ" start "$dir" --owner-pid $$ | tail -n1)"
echo "==> Mosquitto $("$(bash "$MQ" install)" -h 2>/dev/null | head -n1 | awk '{print $3}') at $url"
cd "$ROOT"
# shellcheck disable=SC2086
MQTT_BROKER="$url" "$GO" test $GOTEST_FLAGS -count=1 $PACKAGES
