# Shell helpers shared by the scripts that start test servers
# (integration/kafka/{kafka,cluster,secure}.sh, integration/postgres/postgres.sh).
# Sourced, never run. The sourcing script defines die and note.

# free_ports N: prints N distinct free TCP ports on 127.0.0.1, space separated.
free_ports() {
  python3 - "${1:-2}" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
}

# port_open PORT: true if something accepts connections on 127.0.0.1:PORT.
port_open() {
  python3 - "$1" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(1)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
PY
}

# alive PID: true while the process runs (zombies count as gone).
alive() {
  local pid="$1" state
  kill -0 "$pid" 2>/dev/null || return 1
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)"
  [[ "$state" != "Z" ]]
}

# cmdline_has PID ARG: true if one argument of PID's command line is ARG
# (the server started for this work dir: guards against pid reuse).
cmdline_has() {
  local pid="$1" arg="$2"
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF -- "$arg"
}

# parse_start_args USAGE ARGS...: the options of a start subcommand, into
# START_DIR, START_TV (--transaction-version, default 2) and START_OWNER
# (--owner-pid). Set START_NO_TV=1 before the call to refuse
# --transaction-version.
parse_start_args() {
  local usage="$1"
  shift
  START_DIR="" START_TV=2 START_OWNER=""
  while (($#)); do
    case "$1" in
      --transaction-version | --owner-pid)
        (($# >= 2)) || die "$1 needs a value"
        set -- "$1=$2" "${@:3}"
        ;;
      --transaction-version=*)
        [[ -z "${START_NO_TV:-}" ]] || die "start: unknown option ${1%%=*}"
        START_TV="${1#*=}"; shift ;;
      --owner-pid=*) START_OWNER="${1#*=}"; shift ;;
      -*) die "start: unknown option $1" ;;
      *) [[ -z "$START_DIR" ]] || die "start: unexpected argument $1"; START_DIR="$1"; shift ;;
    esac
  done
  [[ -n "$START_DIR" ]] || die "usage: $usage"
  [[ "$START_TV" =~ ^[012]$ ]] || die "--transaction-version must be 0, 1 or 2 (got $START_TV)"
  [[ -z "$START_OWNER" || "$START_OWNER" =~ ^[0-9]+$ ]] || die "--owner-pid must be a pid (got $START_OWNER)"
  command -v python3 >/dev/null || die "python3 not found"
}

# watchdog NAME OWNER PID SCRIPT WORKDIR: once OWNER has exited, runs
# `bash SCRIPT stop WORKDIR` if PID still runs (so a crashed test run leaks
# nothing). Detached from the caller's session and stdio.
watchdog() {
  # shellcheck disable=SC2016 # expanded by the inner bash
  setsid bash -c '
    owner="$1"; pid="$2"; script="$3"; workdir="$4"
    while kill -0 "$owner" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 1; done
    kill -0 "$pid" 2>/dev/null && exec bash "$script" stop "$workdir"
  ' "$1" "$2" "$3" "$4" "$5" </dev/null >/dev/null 2>&1 &
}

# stop_pids SIGNAL GRACE PID...: CONT and SIGNAL every PID, KILL what is
# left after GRACE seconds, then wait a moment for init to reap them.
# Fails if one survives KILL.
stop_pids() {
  local sig="$1" grace="$2" pid i left
  shift 2
  (($#)) || return 0
  for pid in "$@"; do
    kill -CONT "$pid" 2>/dev/null || true
    kill "-$sig" "$pid" 2>/dev/null || true
  done
  for ((i = 0; i < grace * 5; i++)); do
    left=0
    for pid in "$@"; do alive "$pid" && left=1; done
    ((left)) || break
    sleep 0.2
  done
  for pid in "$@"; do
    if alive "$pid"; then
      note "pid $pid did not stop within ${grace}s; sending KILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  for ((i = 0; i < 50; i++)); do
    left=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left=1; done
    ((left)) || break
    sleep 0.1
  done
  for pid in "$@"; do
    alive "$pid" && die "pid $pid survived KILL"
  done
  return 0
}
