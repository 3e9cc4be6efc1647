#!/usr/bin/env bash
# Fetch, start and stop a real single-node Apache Kafka 4.x broker (KRaft,
# combined broker+controller) for flechtwerk's integration tests.
#
# The broker's jars come from Maven Central only (see pom.xml next to this
# script) and are cached outside the work tree in
#   ${FLECHTWERK_KAFKA_CACHE:-$HOME/.cache/flechtwerk/kafka-<version>}
#
# Usage:
#   kafka.sh fetch
#       Populate the jar cache (idempotent; a no-op once complete).
#   kafka.sh start <workdir> [--transaction-version 0|1|2] [--owner-pid PID]
#       Format <workdir>/logs with a fresh cluster id and the requested
#       transaction.version feature level (default 2), start the broker in the
#       background on free 127.0.0.1 ports and wait until it is ready.
#       Prints the bootstrap address (127.0.0.1:PORT) as the last stdout line
#       and also writes it to <workdir>/bootstrap.
#       Files in <workdir>: server.properties, kafka.log, kafka.pid,
#       bootstrap, cluster.id, transaction.version, format.log, logs/.
#       With --owner-pid, a watchdog stops the broker once PID has exited
#       (e.g. pass the test binary's pid so a crashed test run leaks nothing).
#   kafka.sh stop <workdir>
#       TERM the broker, wait up to 20 s, then KILL. Idempotent.
#   kafka.sh version
#       Print the pinned Kafka version.
#
# Environment:
#   FLECHTWERK_KAFKA_CACHE   jar cache directory (see above)
#   FLECHTWERK_KAFKA_HEAP    max heap (default 768m)
#   FLECHTWERK_KAFKA_JVM_OPTS  extra JVM flags of the broker (word-split)
#   FLECHTWERK_KAFKA_PROPS   extra broker settings, key=value words appended to
#                            server.properties (later lines win)
#   FLECHTWERK_KAFKA_START_TIMEOUT  seconds to wait for readiness (default 120)
#   JAVA                     java binary (default: java)
#   MVN                      maven binary (default: mvn)
#
# Only stdout line on success is the bootstrap address (start) or the
# version (version); all diagnostics go to stderr.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/pom.xml"
LOG4J_CONFIG="$SCRIPT_DIR/log4j2.xml"
JAVA="${JAVA:-java}"
MVN="${MVN:-mvn}"

die() { echo "kafka.sh: $*" >&2; exit 1; }
note() { echo "kafka.sh: $*" >&2; }

# shellcheck source=../lib.sh
source "$SCRIPT_DIR/../lib.sh"

kafka_version() {
  local v
  v="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM" | head -n1)"
  [[ -n "$v" ]] || die "cannot read <kafka.version> from $POM"
  printf '%s\n' "$v"
}

cache_dir() {
  printf '%s\n' "${FLECHTWERK_KAFKA_CACHE:-$HOME/.cache/flechtwerk/kafka-$(kafka_version)}"
}

# The marker holds a hash of pom.xml, so changing the pom refetches.
pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

cache_complete() {
  local cache="$1"
  [[ -f "$cache/.complete" ]] && [[ "$(cat "$cache/.complete")" == "$(pom_hash)" ]] &&
    compgen -G "$cache/libs/kafka_2.13-*.jar" >/dev/null
}

cmd_fetch() {
  local cache
  cache="$(cache_dir)"
  cache_complete "$cache" && return 0
  mkdir -p "$cache"
  # Serialise concurrent fetches (e.g. several test packages at once).
  exec 9>"$cache/.lock"
  flock 9
  if cache_complete "$cache"; then exec 9>&-; return 0; fi
  command -v "$MVN" >/dev/null || die "maven ($MVN) not found"
  note "fetching Kafka $(kafka_version) jars from Maven Central into $cache"
  rm -rf "$cache/libs.tmp" "$cache/libs" "$cache/.complete"
  local mvnlog="$cache/mvn.log"
  if ! "$MVN" -B -q -f "$POM" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$cache/libs.tmp" >"$mvnlog" 2>&1; then
    tail -n 50 "$mvnlog" >&2 || true
    die "maven failed to fetch Kafka jars (full log: $mvnlog)"
  fi
  compgen -G "$cache/libs.tmp/kafka_2.13-*.jar" >/dev/null ||
    die "maven finished but no kafka_2.13 jar in $cache/libs.tmp"
  mv "$cache/libs.tmp" "$cache/libs"
  pom_hash >"$cache/.complete"
  exec 9>&-
}

# A Kafka cluster id: 16 random bytes, base64url without padding, not
# starting with '-' (same shape as `kafka-storage random-uuid`).
random_cluster_id() {
  python3 - <<'PY2'
import base64, os
while True:
    s = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not s.startswith("-"):
        print(s)
        break
PY2
}

# True if pid is the broker started with this server.properties.
is_our_broker() { cmdline_has "$1" "$2"; }

# single_node_props <workdir>: the settings every single-node test broker
# shares (kafka.sh's and secure.sh's), appended to server.properties.
single_node_props() {
  cat <<EOF

# Single node: every internal topic has one replica.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
auto.create.topics.enable=false
auto.leader.rebalance.enable=false
log.dirs=$1/logs
# Tests write records with fixed event times years in the past: time-based
# retention would delete them at its next check (every 5 minutes), between
# a test's write and its read.
log.retention.ms=-1

# Fast tests.
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
group.consumer.min.session.timeout.ms=1000
group.consumer.min.heartbeat.interval.ms=500
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
transaction.remove.expired.transaction.cleanup.interval.ms=10000
log.cleaner.backoff.ms=1000
num.network.threads=2
num.io.threads=4
EOF
}

# plaintext_props <workdir> <port> <controller port>: kafka.sh's broker.
plaintext_props() {
  cat <<EOF
# Generated by integration/kafka/kafka.sh: single-node KRaft test broker.
node.id=1
process.roles=broker,controller
controller.quorum.voters=1@127.0.0.1:$3
listeners=PLAINTEXT://127.0.0.1:$2,CONTROLLER://127.0.0.1:$3
advertised.listeners=PLAINTEXT://127.0.0.1:$2
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
  single_node_props "$1"
}

# start_single_node <workdir> <tv> <owner> <props function> [format args]:
# formats <workdir>/logs and starts one broker on free ports, its
# server.properties written by `<props function> <workdir> <port>
# <controller port>`; the extra args go to the storage format command.
# Waits until it is ready and prints the bootstrap address. Retries with new
# ports on a port clash.
start_single_node() {
  local workdir="$1" tv="$2" owner="$3" props_fn="$4"
  shift 4
  command -v "$JAVA" >/dev/null || die "java ($JAVA) not found"
  cmd_fetch
  local cache
  cache="$(cache_dir)"

  mkdir -p "$workdir"
  workdir="$(cd "$workdir" && pwd)"
  if [[ -f "$workdir/kafka.pid" ]]; then
    local old
    old="$(cat "$workdir/kafka.pid")"
    if [[ -n "$old" ]] && alive "$old" && is_our_broker "$old" "$workdir/server.properties"; then
      die "a broker (pid $old) is already running for $workdir; stop it first"
    fi
  fi
  local attempt port=""
  for attempt in 1 2 3; do
    rm -rf "$workdir/logs" "$workdir/kafka.log" "$workdir/kafka.pid" "$workdir/bootstrap"
    mkdir -p "$workdir/logs"

    local ports cport cluster_id props="$workdir/server.properties"
    ports="$(free_ports 2)"
    port="${ports% *}"
    cport="${ports#* }"
    cluster_id="$(random_cluster_id)"
    "$props_fn" "$workdir" "$port" "$cport" >"$props"
    if [[ -n "${FLECHTWERK_KAFKA_PROPS:-}" ]]; then
      # shellcheck disable=SC2086 # one key=value per word
      printf '%s\n' "" "# FLECHTWERK_KAFKA_PROPS" ${FLECHTWERK_KAFKA_PROPS} >>"$props"
    fi
    printf '%s\n' "$cluster_id" >"$workdir/cluster.id"
    printf '%s\n' "$tv" >"$workdir/transaction.version"

    local cp="$cache/libs/*"
    local -a jvm=("-Xmx${FLECHTWERK_KAFKA_HEAP:-768m}" -Xms128m -XX:+UseG1GC
      -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
      "-Dlog4j2.configurationFile=$LOG4J_CONFIG" "-Dkafka.logs.dir=$workdir")
    # shellcheck disable=SC2206
    jvm+=(${FLECHTWERK_KAFKA_JVM_OPTS:-})

    local fmtlog="$workdir/format.log"
    if ! "$JAVA" "${jvm[@]}" -cp "$cp" kafka.tools.StorageTool format \
        --config "$props" --cluster-id "$cluster_id" \
        --feature "transaction.version=$tv" "$@" >"$fmtlog" 2>&1; then
      cat "$fmtlog" >&2
      die "formatting $workdir/logs failed"
    fi

    # Detach fully: own session, no inherited stdio (so a caller that captures
    # our stdout, e.g. Go's exec.Cmd.Output, does not wait for the broker).
    setsid "$JAVA" "${jvm[@]}" -cp "$cp" kafka.Kafka "$props" \
      </dev/null >"$workdir/kafka.log" 2>&1 &
    local pid=$!
    printf '%s\n' "$pid" >"$workdir/kafka.pid"

    local timeout="${FLECHTWERK_KAFKA_START_TIMEOUT:-120}" deadline ready=""
    deadline=$((SECONDS + timeout))
    while ((SECONDS < deadline)); do
      alive "$pid" || break
      if grep -q "Kafka Server started" "$workdir/kafka.log" 2>/dev/null && port_open "$port"; then
        ready=1
        break
      fi
      sleep 0.2
    done
    [[ -n "$ready" ]] && break
    # bind(0) picked the ports but released them before the JVM bound them;
    # rarely something else grabs one in between: retry with fresh ports.
    if ((attempt < 3)) && ! alive "$pid" &&
        grep -q "Address already in use" "$workdir/kafka.log" 2>/dev/null; then
      note "port clash on attempt $attempt; retrying with new ports"
      rm -f "$workdir/kafka.pid"
      continue
    fi
    if alive "$pid"; then
      note "broker not ready after ${timeout}s"
    else
      note "broker exited during startup"
    fi
    note "last lines of $workdir/kafka.log:"
    tail -n 60 "$workdir/kafka.log" >&2 || true
    cmd_stop "$workdir" || true
    exit 1
  done

  if [[ -n "$owner" ]]; then
    watchdog kafka-watchdog "$owner" "$pid" "$SCRIPT_DIR/kafka.sh" "$workdir"
  fi
  printf '127.0.0.1:%s\n' "$port" >"$workdir/bootstrap"
  printf '127.0.0.1:%s\n' "$port"
}

cmd_start() {
  parse_start_args "kafka.sh start <workdir> [--transaction-version 0|1|2] [--owner-pid PID]" "$@"
  start_single_node "$START_DIR" "$START_TV" "$START_OWNER" plaintext_props
}

cmd_stop() {
  (($# == 1)) || die "usage: kafka.sh stop <workdir>"
  local workdir="$1"
  [[ -d "$workdir" ]] || return 0
  workdir="$(cd "$workdir" && pwd)"
  local pidfile="$workdir/kafka.pid"
  [[ -f "$pidfile" ]] || return 0
  local pid
  pid="$(cat "$pidfile")"
  if [[ -n "$pid" ]] && alive "$pid" && is_our_broker "$pid" "$workdir/server.properties"; then
    stop_pids TERM 20 "$pid"
  fi
  rm -f "$pidfile"
}

main() {
  (($# >= 1)) || die "usage: kafka.sh fetch | start <workdir> [--transaction-version 0|1|2] [--owner-pid PID] | stop <workdir> | version"
  local sub="$1"
  shift
  case "$sub" in
    fetch) (($# == 0)) || die "usage: kafka.sh fetch"; cmd_fetch ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    version) kafka_version ;;
    -h | --help | help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2 ;;
    *) die "unknown subcommand: $sub" ;;
  esac
}

# Sourced (by cluster.sh and secure.sh, for its helpers): define the functions only.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
