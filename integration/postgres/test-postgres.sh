#!/usr/bin/env bash
# Runs the tests that need PostgreSQL against a throw-away server started by
# postgres.sh (installing PostgreSQL from the system's packages when it is
# missing), and stops it afterwards, also when a test fails. Exits non-zero
# on any failure.
#
# Environment:
#   GO                  go binary (default: go)
#   PG_TEST_PACKAGES    packages to test (default: every module's packages,
#                       scripts/packages.sh)
#   GOTEST_FLAGS        extra go test flags (default: -race)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
GO="${GO:-go}"
PG="$SCRIPT_DIR/postgres.sh"
GOTEST_FLAGS="${GOTEST_FLAGS:--race}"
PACKAGES="${PG_TEST_PACKAGES:-}"
[[ -n "$PACKAGES" ]] || PACKAGES="$(GO="$GO" bash "$ROOT/scripts/packages.sh")"

dir="$(mktemp -d -t flechtwerk-pg-XXXXXX)"
cleanup() {
  bash "$PG" stop "$dir" || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

url="$(bash "$PG" start "$dir" --owner-pid $$ | tail -n1)"
echo "==> PostgreSQL at $url"
cd "$ROOT"
# shellcheck disable=SC2086
PG_URL="$url" "$GO" test $GOTEST_FLAGS -count=1 $PACKAGES
