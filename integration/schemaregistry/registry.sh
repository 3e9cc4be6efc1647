#!/usr/bin/env bash
# Fetch, start and stop a real schema registry for the schemaregistry
# module's tests: Apicurio Registry (in-memory storage) with its
# Confluent-compatible API at /apis/ccompat/v7.
#
# Maven Central carries io.apicurio:apicurio-registry-app as a plain Quarkus
# application jar, not a runnable one, so `fetch` re-runs the Quarkus build
# over it (pom.xml next to this script, whose comments say what it works
# around) and caches the result outside the work tree in
#   ${FLECHTWERK_REGISTRY_CACHE:-$HOME/.cache/flechtwerk/apicurio-registry-<version>}
#
# Usage:
#   registry.sh fetch
#       Build the registry into the cache (idempotent; a no-op once done).
#   registry.sh start <workdir> [--owner-pid PID]
#       Start the registry on a free 127.0.0.1 port and wait until its
#       Confluent-compatible API answers. Prints that API's URL
#       (http://127.0.0.1:PORT/apis/ccompat/v7) as the last stdout line and
#       writes it to <workdir>/url. Files in <workdir>: registry.log,
#       registry.pid, url, started.seconds (how long the start took).
#       With --owner-pid, a watchdog stops the registry once PID exited.
#   registry.sh stop <workdir>
#       TERM the registry, wait up to 20 s, then KILL. Idempotent.
#   registry.sh version
#       Print the pinned Apicurio Registry version.
#
# Environment:
#   FLECHTWERK_REGISTRY_CACHE          build cache directory (see above)
#   FLECHTWERK_REGISTRY_HEAP           max heap (default 512m)
#   FLECHTWERK_REGISTRY_START_TIMEOUT  seconds to wait for readiness (default 120)
#   JAVA                               java binary, 17 or later (default: java)
#   MVN                                maven binary (default: mvn)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/pom.xml"
JAVA="${JAVA:-java}"
MVN="${MVN:-mvn}"

die() { echo "registry.sh: $*" >&2; exit 1; }
note() { echo "registry.sh: $*" >&2; }

# shellcheck source=../lib.sh
source "$SCRIPT_DIR/../lib.sh"

registry_version() {
  local v
  v="$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' "$POM" | head -n1)"
  [[ -n "$v" ]] || die "cannot read <apicurio.version> from $POM"
  printf '%s\n' "$v"
}

cache_dir() {
  printf '%s\n' "${FLECHTWERK_REGISTRY_CACHE:-$HOME/.cache/flechtwerk/apicurio-registry-$(registry_version)}"
}

# The marker holds a hash of the build's sources, so changing them rebuilds.
build_hash() {
  (cd "$SCRIPT_DIR" && find pom.xml src -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1
}

runner_jar() { compgen -G "$1/build/target/*-runner.jar" | head -n1; }

cache_complete() {
  local cache="$1"
  [[ -f "$cache/.complete" ]] && [[ "$(cat "$cache/.complete")" == "$(build_hash)" ]] &&
    [[ -n "$(runner_jar "$cache")" ]]
}

cmd_fetch() {
  local cache
  cache="$(cache_dir)"
  cache_complete "$cache" && return 0
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9
  if cache_complete "$cache"; then exec 9>&-; return 0; fi
  command -v "$MVN" >/dev/null || die "maven ($MVN) not found"
  note "building Apicurio Registry $(registry_version) from Maven Central into $cache"
  rm -rf "$cache/build" "$cache/.complete"
  mkdir -p "$cache/build"
  cp -r "$POM" "$SCRIPT_DIR/src" "$cache/build/"
  local log="$cache/mvn.log"
  if ! "$MVN" -B -q -f "$cache/build/pom.xml" package -DskipTests >"$log" 2>&1; then
    tail -n 50 "$log" >&2 || true
    die "maven failed to build the registry (full log: $log)"
  fi
  [[ -n "$(runner_jar "$cache")" ]] || die "maven finished but no runner jar in $cache/build/target"
  build_hash >"$cache/.complete"
  exec 9>&-
}

is_our_registry() { cmdline_has "$1" "-Dflechtwerk.registry.dir=$2"; }

cmd_start() {
  START_NO_TV=1 parse_start_args "registry.sh start <workdir> [--owner-pid PID]" "$@"
  local dir="$START_DIR" owner="$START_OWNER"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd -P)"
  if [[ -f "$dir/registry.pid" ]] && is_our_registry "$(cat "$dir/registry.pid")" "$dir"; then
    die "a registry already runs for $dir (pid $(cat "$dir/registry.pid"))"
  fi
  cmd_fetch
  local jar port url pid t0 t1 i timeout="${FLECHTWERK_REGISTRY_START_TIMEOUT:-120}"
  jar="$(runner_jar "$(cache_dir)")"
  port="$(free_ports 1)"
  url="http://127.0.0.1:$port/apis/ccompat/v7"
  t0="$(date +%s.%N)"
  # shellcheck disable=SC2086
  setsid "$JAVA" "-Xmx${FLECHTWERK_REGISTRY_HEAP:-512m}" -XX:+UseSerialGC \
    "-Dflechtwerk.registry.dir=$dir" \
    -Dquarkus.http.host=127.0.0.1 "-Dquarkus.http.port=$port" \
    -Dquarkus.log.level=WARN -Dquarkus.log.min-level=INFO \
    -jar "$jar" </dev/null >"$dir/registry.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/registry.pid"
  [[ -z "$owner" ]] || watchdog registry "$owner" "$pid" "$SCRIPT_DIR/registry.sh" "$dir"
  for ((i = 0; i < timeout * 5; i++)); do
    if ! alive "$pid"; then
      tail -n 40 "$dir/registry.log" >&2 || true
      die "the registry exited during start (log: $dir/registry.log)"
    fi
    if python3 - "$url/subjects" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
    then
      t1="$(date +%s.%N)"
      python3 -c "print(f'{$t1 - $t0:.1f}')" >"$dir/started.seconds"
      note "Apicurio Registry $(registry_version) ready in $(cat "$dir/started.seconds") s at $url"
      echo "$url" >"$dir/url"
      echo "$url"
      return 0
    fi
    sleep 0.2
  done
  cmd_stop "$dir"
  die "the registry did not answer within ${timeout}s (log: $dir/registry.log)"
}

cmd_stop() {
  local dir="${1:-}" pid
  [[ -n "$dir" ]] || die "usage: registry.sh stop <workdir>"
  [[ -d "$dir" ]] || return 0
  dir="$(cd "$dir" && pwd -P)"
  [[ -f "$dir/registry.pid" ]] || return 0
  pid="$(cat "$dir/registry.pid")"
  if is_our_registry "$pid" "$dir"; then
    stop_pids TERM 20 "$pid"
  fi
  rm -f "$dir/registry.pid"
}

case "${1:-}" in
  fetch) shift; cmd_fetch "$@" ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  version) registry_version ;;
  *) die "usage: registry.sh fetch | start <workdir> [--owner-pid PID] | stop <workdir> | version" ;;
esac
