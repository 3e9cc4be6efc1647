#!/usr/bin/env bash
# Runs the alert rules' checks with Prometheus's own tools: the metric
# catalog test (metrics.TestAlertRules) with promtool required, which runs
# `promtool check rules docs/alerts.yml` and `promtool test rules
# docs/alerts_test.yml`. Installs promtool from Debian's packages
# (prometheus) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
if ! command -v promtool >/dev/null; then
  command -v apt-get >/dev/null || { echo "promtool.sh: promtool is missing and apt-get is not available: install Prometheus' promtool" >&2; exit 1; }
  echo "promtool.sh: installing promtool (Debian package prometheus)" >&2
  log="$(mktemp)"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; } >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; exit 1
  fi
  rm -f "$log"
  # The package starts a Prometheus server; the tests need only promtool.
  (systemctl stop prometheus || service prometheus stop || pkill -x prometheus) >/dev/null 2>&1 || true
fi
FLECHTWERK_REQUIRE_PROMTOOL=1 "$GO" test -count=1 -v -run 'TestAlertRules' ./metrics/
