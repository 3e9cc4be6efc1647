#!/usr/bin/env bash
# The MQTT bridge benchmark: this project's bridge against the Python
# library's (flechtwerk 0.17.0, flechtwerk.mqtt) on the same brokers in one
# run: one Apache Kafka 4.x broker (integration/kafka/kafka.sh) and one
# Mosquitto 2 (integration/mqtt/mosquitto.sh), both on 127.0.0.1, stopped on
# exit. The Python bridge runs in a virtual environment of Python 3.13
# (pyenv's 3.13, else python3.13) with flechtwerk[mqtt]==0.17.0 from PyPI,
# made once under ~/.cache/flechtwerk/mqttbench-venv-0.17.0.
#
# Environment: GO (default go), MQTTBENCH_FLAGS (extra flags of
# bench/cmd/mqttbench, e.g. "-n 50000 -duration 20s"), MQTTBENCH_PYTHON=none
# to skip the Python bridge.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
GO="${GO:-go}"
cd "$ROOT"
# shellcheck source=../kafka.sh
source "$ROOT/bench/kafka.sh"

mq_dir="$(mktemp -d -t flechtwerk-mqttbench-mosquitto-XXXXXX)"
stop_all() {
  bash "$ROOT/integration/mqtt/mosquitto.sh" stop "$mq_dir" || true
  rm -rf "$mq_dir"
  bench_kafka_stop
}
trap stop_all EXIT INT TERM

py=""
if [[ "${MQTTBENCH_PYTHON:-}" != "none" ]]; then
  venv="$HOME/.cache/flechtwerk/mqttbench-venv-0.17.0"
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import flechtwerk.mqtt' 2>/dev/null; then
    base=""
    if command -v pyenv >/dev/null && pyenv prefix 3.13 >/dev/null 2>&1; then
      base="$(pyenv prefix 3.13)/bin/python3"
    elif command -v python3.13 >/dev/null; then
      base="$(command -v python3.13)"
    else
      echo "run.sh: Python 3.13 not found (pyenv install 3.13, or MQTTBENCH_PYTHON=none)" >&2
      exit 1
    fi
    rm -rf "$venv"
    "$base" -m venv "$venv"
    "$venv/bin/pip" install -q 'flechtwerk[mqtt]==0.17.0'
  fi
  py="$venv/bin/python"
fi

bench_kafka_start mqttbench
mqtt_url="$(bash "$ROOT/integration/mqtt/mosquitto.sh" start "$mq_dir" --owner-pid $$ | tail -n1)"
echo "==> Kafka $KAFKA_VERSION at $BROKERS, Mosquitto at $mqtt_url"
# shellcheck disable=SC2086
"$GO" run ./bench/cmd/mqttbench -brokers "$BROKERS" -mqtt "$mqtt_url" -python "$py" ${MQTTBENCH_FLAGS:-}
