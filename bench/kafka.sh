# Sourced by bench/run.sh and bench/recovery.sh, never run: one single-node
# Apache Kafka 4.x broker (integration/kafka/kafka.sh) that the sourcing
# script starts with bench_kafka_start and that is stopped on its exit, also
# after a failure (the trap set here), or earlier with bench_kafka_stop.
# The sourcing script sets ROOT (the checkout) first.

BENCH_KAFKA="$ROOT/integration/kafka/kafka.sh"
bench_kafka_dir=""

# bench_kafka_stop: stops the broker and removes its directory (a no-op when
# none runs).
bench_kafka_stop() {
  if [[ -n "$bench_kafka_dir" ]]; then
    bash "$BENCH_KAFKA" stop "$bench_kafka_dir" || true
    rm -rf "$bench_kafka_dir"
    bench_kafka_dir=""
  fi
}
trap bench_kafka_stop EXIT INT TERM

# bench_kafka_start NAME: fetches the jars once, starts a broker in a new
# temporary directory named after NAME and sets KAFKA_VERSION, BROKERS (its
# bootstrap address) and KAFKA_PID.
bench_kafka_start() {
  bash "$BENCH_KAFKA" fetch
  KAFKA_VERSION="$(bash "$BENCH_KAFKA" version)"
  bench_kafka_dir="$(mktemp -d -t "flechtwerk-$1-kafka-XXXXXX")"
  BROKERS="$(bash "$BENCH_KAFKA" start "$bench_kafka_dir" --owner-pid $$ | tail -1)"
  KAFKA_PID="$(cat "$bench_kafka_dir/kafka.pid")"
}
