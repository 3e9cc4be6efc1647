#!/usr/bin/env bash
# Start and stop a throw-away Mosquitto 2 broker for flechtwerk's MQTT tests.
#
# The broker listens on 127.0.0.1 only, on a free port, anonymous, without
# persistence (sessions live as long as the process). Mosquitto comes from
# the system's packages: when no mosquitto binary is found and we run as
# root with apt-get, `apt-get update` and `apt-get install -y mosquitto`
# install it (Debian/Ubuntu; the packaged service is not used).
#
# Usage:
#   mosquitto.sh install
#       Install Mosquitto if missing (idempotent) and print its path.
#   mosquitto.sh start <workdir> [--owner-pid PID]
#       Write <workdir>/mosquitto.conf, start the broker in the background,
#       wait until it accepts connections and print its URL
#         tcp://127.0.0.1:PORT
#       as the last stdout line (also written to <workdir>/url).
#       With --owner-pid, a watchdog stops the broker once PID has exited.
#   mosquitto.sh stop <workdir>
#       TERM, then KILL after 10 s. Idempotent.
#
# The config raises two limits that bound a bridge under test: a 3.1.1
# client's in-flight window (max_inflight_messages, default 20: with
# acknowledgements sent only after each Kafka commit, 20 messages per
# commit at most) and the per-client queue behind it (max_queued_messages,
# default 1000: Mosquitto DROPS QoS 1 messages past it, the tail of a
# session whose client id is away). A production broker needs the same
# thought (docs/mqtt.md).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() { echo "mosquitto.sh: $*" >&2; exit 1; }
note() { echo "mosquitto.sh: $*" >&2; }
# shellcheck source=../lib.sh
source "$SCRIPT_DIR/../lib.sh"

find_bin() {
  local b
  for b in "${MOSQUITTO_BIN:-}" /usr/sbin/mosquitto "$(command -v mosquitto 2>/dev/null || true)"; do
    if [[ -n "$b" && -x "$b" ]]; then
      printf '%s\n' "$b"
      return
    fi
  done
}

install() {
  local b
  b="$(find_bin)"
  if [[ -z "$b" ]]; then
    [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null || die "mosquitto is missing; install the mosquitto package"
    note "installing mosquitto (apt-get)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mosquitto >&2
    b="$(find_bin)"
    [[ -n "$b" ]] || die "mosquitto still missing after apt-get install"
  fi
  printf '%s\n' "$b"
}

start() {
  local dir="" owner=""
  while (($#)); do
    case "$1" in
      --owner-pid) owner="$2"; shift 2 ;;
      *) [[ -z "$dir" ]] || die "usage: mosquitto.sh start <workdir> [--owner-pid PID]"; dir="$1"; shift ;;
    esac
  done
  [[ -n "$dir" ]] || die "usage: mosquitto.sh start <workdir> [--owner-pid PID]"
  mkdir -p "$dir"
  local bin port
  bin="$(install)"
  port="$(free_ports 1)"
  cat >"$dir/mosquitto.conf" <<CONF
listener $port 127.0.0.1
allow_anonymous true
persistence false
max_inflight_messages 1000
max_queued_messages 1000000
max_queued_bytes 0
log_dest file $dir/mosquitto.log
log_type error
log_type warning
log_type notice
CONF
  # As root, mosquitto switches to the user "mosquitto" (the package makes
  # it); the log file must be writable for it.
  touch "$dir/mosquitto.log"
  chmod 0777 "$dir" && chmod 0666 "$dir/mosquitto.log"
  "$bin" -c "$dir/mosquitto.conf" >>"$dir/mosquitto.log" 2>&1 &
  echo $! >"$dir/mosquitto.pid"
  local i
  for ((i = 0; i < 100; i++)); do
    port_open "$port" && break
    alive "$(cat "$dir/mosquitto.pid")" || { cat "$dir/mosquitto.log" >&2; die "mosquitto exited"; }
    sleep 0.1
  done
  port_open "$port" || die "mosquitto did not open port $port"
  if [[ -n "$owner" ]]; then
    ( while alive "$owner"; do sleep 1; done; bash "$SCRIPT_DIR/mosquitto.sh" stop "$dir" ) >/dev/null 2>&1 &
  fi
  echo "tcp://127.0.0.1:$port" | tee "$dir/url"
}

stop() {
  local dir="${1:?usage: mosquitto.sh stop <workdir>}" pid i
  [[ -f "$dir/mosquitto.pid" ]] || return 0
  pid="$(cat "$dir/mosquitto.pid")"
  if alive "$pid" && cmdline_has "$pid" "$dir/mosquitto.conf"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/mosquitto.pid"
}

case "${1:-}" in
  install) install ;;
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) die "usage: mosquitto.sh install | start <workdir> [--owner-pid PID] | stop <workdir>" ;;
esac
