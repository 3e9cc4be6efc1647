# make test   - everything: vet, the suite on the embedded broker (race
#               detector), then the suite against real Apache Kafka 4.x
#               (transaction versions 2 and 1) fetched from Maven Central.
# make run    - the word-count example on an embedded broker.
# make bench  - the throughput/latency benchmark (bench/run.sh): plain loop,
#               GroupTransactSession loop and the runner on Apache Kafka and
#               on the embedded broker. BENCH_RECORDS=300000 scales it down.
GO ?= go

.PHONY: test test-embedded test-kafka run bench chaos-long

test: test-embedded test-kafka

test-embedded:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

test-kafka:
	bash integration/kafka/test-kafka.sh

run:
	$(GO) run ./examples/wordcount

bench:
	GO=$(GO) bash bench/run.sh

# One long chaos run against Apache Kafka (transaction version 2).
chaos-long:
	KAFKA_TEST_VERSIONS=2 CHAOS_RECORDS=1000000 GOTEST_FLAGS= bash integration/kafka/test-kafka.sh

# The PostgreSQL tests (the sink example's kill test) with a throw-away
# server started by integration/postgres/test-postgres.sh.
test: test-postgres
.PHONY: test-postgres
test-postgres:
	GO=$(GO) PG_TEST_PACKAGES="./examples/pgsink ./internal/pgtest" bash integration/postgres/test-postgres.sh
