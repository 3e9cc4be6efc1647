#!/usr/bin/env bash
# Start and stop a throw-away PostgreSQL server for flechtwerk's tests.
#
# The server listens on 127.0.0.1 only, on a free port, with its own data
# directory and trust authentication (test use only). PostgreSQL comes from
# the system's packages: when no server binary is found and we run as root
# with apt-get, `apt-get update` and `apt-get install -y postgresql` install
# it (Debian/Ubuntu; the binaries land in /usr/lib/postgresql/<v>/bin).
#
# Usage:
#   postgres.sh install
#       Install PostgreSQL if missing (idempotent) and print its bin dir.
#   postgres.sh start <workdir> [--owner-pid PID]
#       initdb <workdir>/data, start the server in the background on
#       127.0.0.1:PORT, wait until it accepts connections, create the
#       database, and print the connection URL
#         postgres://flechtwerk@127.0.0.1:PORT/flechtwerk
#       as the last stdout line (also written to <workdir>/url).
#       initdb and the server refuse to run as root; as root they run as the
#       `postgres` system user (created if missing), which then owns
#       <workdir>/data; <workdir> itself is made traversable (chmod o+x).
#       Files in <workdir>: data/, postgres.log, postgres.pid, port, url,
#       initdb.log.
#       With --owner-pid, a watchdog stops the server once PID has exited
#       (e.g. pass the test binary's pid so a crashed test run leaks nothing).
#   postgres.sh stop <workdir>
#       Fast shutdown (pg_ctl -m fast, up to 20 s), then KILL. Idempotent.
#
# Environment:
#   PG_BIN                  directory of initdb/pg_ctl/postgres (default: the
#                           newest /usr/lib/postgresql/*/bin, else PATH)
#   FLECHTWERK_PG_USER      database user and database name (default flechtwerk)
#   FLECHTWERK_PG_OS_USER   system user that runs the server when we are root
#                           (default postgres)
#   FLECHTWERK_PG_START_TIMEOUT  seconds to wait for readiness (default 60)
#
# The only stdout line on success is the URL (start) or the bin dir
# (install); all diagnostics go to stderr.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DB_USER="${FLECHTWERK_PG_USER:-flechtwerk}"
OS_USER="${FLECHTWERK_PG_OS_USER:-postgres}"

die() { echo "postgres.sh: $*" >&2; exit 1; }
note() { echo "postgres.sh: $*" >&2; }

# shellcheck source=../lib.sh
source "$SCRIPT_DIR/../lib.sh"

# Prints the directory holding initdb, pg_ctl and postgres, or nothing.
find_bin() {
  if [[ -n "${PG_BIN:-}" ]]; then
    [[ -x "$PG_BIN/postgres" ]] || die "PG_BIN=$PG_BIN has no postgres binary"
    printf '%s\n' "$PG_BIN"
    return
  fi
  local d
  d="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -V | tail -n1)"
  if [[ -n "$d" && -x "$d/postgres" && -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
    printf '%s\n' "$d"
    return
  fi
  if command -v postgres >/dev/null && command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    dirname "$(readlink -f "$(command -v postgres)")"
  fi
}

cmd_install() {
  local bin
  bin="$(find_bin)"
  if [[ -z "$bin" ]]; then
    [[ "$(id -u)" == 0 ]] || die "PostgreSQL is not installed and we are not root: install the postgresql package (or set PG_BIN)"
    command -v apt-get >/dev/null || die "PostgreSQL is not installed and apt-get is missing: install PostgreSQL (or set PG_BIN)"
    # Serialise concurrent installs (several test packages at once).
    exec 8>/tmp/flechtwerk-postgres-install.lock
    flock 8
    bin="$(find_bin)"
    if [[ -z "$bin" ]]; then
      note "installing PostgreSQL from the system's packages (apt-get)"
      local log=/tmp/flechtwerk-postgres-install.log
      if ! { DEBIAN_FRONTEND=noninteractive apt-get update &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; } >"$log" 2>&1; then
        tail -n 30 "$log" >&2 || true
        die "apt-get install postgresql failed (full log: $log)"
      fi
      bin="$(find_bin)"
      [[ -n "$bin" ]] || die "postgresql installed but no server binary under /usr/lib/postgresql/*/bin"
    fi
    exec 8>&-
  fi
  printf '%s\n' "$bin"
}

# True if pid is the postmaster of this data dir (guards against pid reuse).
is_our_server() { cmdline_has "$1" "$2"; }

# as_user CMD...: run CMD as the server's system user (ourselves unless root).
as_user() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u "$OS_USER" -- "$@"
  else
    "$@"
  fi
}

ensure_os_user() {
  [[ "$(id -u)" == 0 ]] || return 0
  id "$OS_USER" >/dev/null 2>&1 && return 0
  note "creating system user $OS_USER to run the server (initdb refuses root)"
  useradd --system --no-create-home --shell /usr/sbin/nologin "$OS_USER" ||
    id "$OS_USER" >/dev/null 2>&1 || die "cannot create system user $OS_USER"
}

cmd_start() {
  START_NO_TV=1 parse_start_args "postgres.sh start <workdir> [--owner-pid PID]" "$@"
  local workdir="$START_DIR" owner="$START_OWNER"

  local bin
  bin="$(cmd_install)"
  ensure_os_user

  mkdir -p "$workdir"
  workdir="$(cd "$workdir" && pwd)"
  local data="$workdir/data"
  if [[ -f "$workdir/postgres.pid" ]]; then
    local old
    old="$(cat "$workdir/postgres.pid")"
    if [[ -n "$old" ]] && alive "$old" && is_our_server "$old" "$data"; then
      die "a server (pid $old) is already running for $workdir; stop it first"
    fi
  fi
  rm -rf "$data" "$workdir/postgres.log" "$workdir/postgres.pid" "$workdir/url" "$workdir/port"
  mkdir -p "$data"
  if [[ "$(id -u)" == 0 ]]; then
    chmod o+x "$workdir"
    chown "$OS_USER" "$data"
    touch "$workdir/postgres.log"
    chown "$OS_USER" "$workdir/postgres.log"
    as_user test -w "$data" ||
      die "user $OS_USER cannot write $data: every directory above it must be traversable (o+x); use a workdir under /tmp"
  fi
  chmod 700 "$data"

  if ! as_user "$bin/initdb" -D "$data" -U "$DB_USER" --auth=trust \
      --encoding=UTF8 --no-locale --no-sync >"$workdir/initdb.log" 2>&1; then
    cat "$workdir/initdb.log" >&2
    die "initdb $data failed"
  fi
  cat >>"$data/postgresql.conf" <<'EOF'

# Added by integration/postgres/postgres.sh: a throw-away test server.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 50
shared_buffers = 32MB
EOF

  local timeout="${FLECHTWERK_PG_START_TIMEOUT:-60}" attempt port="" ok=""
  for attempt in 1 2 3; do
    port="$(free_ports 1)"
    # pg_ctl starts the postmaster detached, stdin from /dev/null and output
    # to the log, so a caller capturing our stdout does not wait for it.
    if as_user "$bin/pg_ctl" -D "$data" -l "$workdir/postgres.log" -o "-p $port" \
        -w -t "$timeout" start </dev/null >/dev/null 2>&1; then
      ok=1
      break
    fi
    if ((attempt < 3)) && grep -q "could not bind\|Address already in use" "$workdir/postgres.log" 2>/dev/null; then
      note "port clash on attempt $attempt; retrying with a new port"
      continue
    fi
    break
  done
  if [[ -z "$ok" ]]; then
    note "server did not start; last lines of $workdir/postgres.log:"
    tail -n 40 "$workdir/postgres.log" >&2 || true
    cmd_stop "$workdir" || true
    exit 1
  fi
  local pid
  pid="$(head -n1 "$data/postmaster.pid")"
  printf '%s\n' "$pid" >"$workdir/postgres.pid"
  printf '%s\n' "$port" >"$workdir/port"

  local psql="$bin/psql"
  [[ -x "$psql" ]] || psql="psql"
  if ! "$psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U "$DB_USER" -d postgres \
      -c "CREATE DATABASE \"$DB_USER\"" >/dev/null 2>"$workdir/createdb.log"; then
    cat "$workdir/createdb.log" >&2
    cmd_stop "$workdir" || true
    die "creating database $DB_USER on 127.0.0.1:$port failed"
  fi

  if [[ -n "$owner" ]]; then
    watchdog postgres-watchdog "$owner" "$pid" "$SCRIPT_DIR/postgres.sh" "$workdir"
  fi

  local url="postgres://$DB_USER@127.0.0.1:$port/$DB_USER"
  printf '%s\n' "$url" >"$workdir/url"
  printf '%s\n' "$url"
}

cmd_stop() {
  (($# == 1)) || die "usage: postgres.sh stop <workdir>"
  local workdir="$1"
  [[ -d "$workdir" ]] || return 0
  workdir="$(cd "$workdir" && pwd)"
  local data="$workdir/data" pid=""
  if [[ -f "$workdir/postgres.pid" ]]; then
    pid="$(cat "$workdir/postgres.pid")"
  elif [[ -f "$data/postmaster.pid" ]]; then
    pid="$(head -n1 "$data/postmaster.pid")"
  fi
  if [[ -z "$pid" ]] || ! alive "$pid" || ! is_our_server "$pid" "$data"; then
    rm -f "$workdir/postgres.pid"
    return 0
  fi
  local bin
  bin="$(find_bin)"
  if [[ -n "$bin" ]]; then
    as_user "$bin/pg_ctl" -D "$data" -m fast -w -t 20 stop >/dev/null 2>&1 || true
  fi
  # Still up: SIGINT is the postmaster's fast shutdown.
  alive "$pid" && stop_pids INT 20 "$pid"
  rm -f "$workdir/postgres.pid"
}

main() {
  (($# >= 1)) || die "usage: postgres.sh install | start <workdir> [--owner-pid PID] | stop <workdir>"
  local sub="$1"
  shift
  case "$sub" in
    install) (($# == 0)) || die "usage: postgres.sh install"; cmd_install ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    -h | --help | help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2 ;;
    *) die "unknown subcommand: $sub" ;;
  esac
}

main "$@"
