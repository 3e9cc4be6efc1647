#!/usr/bin/env bash
# Runs the schemaregistry module's tests against a throw-away Apicurio
# Registry (registry.sh), selected by SCHEMA_REGISTRY_URL, and stops it
# afterwards, also when a test fails. Exits non-zero on any failure.
#
# Environment:
#   GO            go binary (default: go)
#   GOTEST_FLAGS  extra go test flags (default: -race)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
GO="${GO:-go}"
REG="$SCRIPT_DIR/registry.sh"
GOTEST_FLAGS="${GOTEST_FLAGS:--race}"

dir="$(mktemp -d -t flechtwerk-registry-XXXXXX)"
cleanup() {
  bash "$REG" stop "$dir" || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

url="$(bash "$REG" start "$dir" --owner-pid $$ | tail -n1)"
echo "==> Apicurio Registry $(bash "$REG" version) at $url (started in $(cat "$dir/started.seconds") s)"
cd "$ROOT"
# shellcheck disable=SC2086
SCHEMA_REGISTRY_URL="$url" "$GO" test $GOTEST_FLAGS -count=1 ./schemaregistry/...
