# make test   - everything: every module tidy (check-mod), no internal
#               type in the public API (check-api), vet, the suite
#               on the embedded broker (race detector), then the suite
#               against real Apache Kafka 4.x (transaction versions 2
#               and 1) fetched from Maven Central,
#               then the cluster chaos pass on three brokers (test-cluster)
#               the security tests (test-secure), the alert rules (test-alerts) and the
#               secrets interoperability test with Python (test-secrets).
# make test-cluster - only the cluster chaos pass: a 3-broker KRaft cluster,
#               200k records while processors and brokers are killed and
#               frozen, leaders re-elected and connections cut, stalled and
#               slowed (integration/kafka/test-cluster.sh).
# make fuzz   - every fuzz target for FUZZTIME (default 5s) each
#               (scripts/fuzz.sh); part of make test.
# make test-secure - the TestSecure* tests against a Kafka broker with TLS,
#               SASL/SCRAM-SHA-512 and the StandardAuthorizer
#               (integration/kafka/secure.sh).
# make test-secrets - interoperability of package secrets with the Python
#               flechtctl and flechtwerk[secrets] 0.17.0 from PyPI in a
#               Python 3.13 venv (integration/secrets/interop.sh).
# make run    - the word-count example on an embedded broker.
# make test-mosquitto - the MQTT bridge tests against Mosquitto 2 (apt).
# make test-schemaregistry - the schemaregistry codecs against Apicurio
#               Registry 2.4.2 (in memory, Confluent-compatible API), built
#               from Maven Central (integration/schemaregistry/registry.sh).
# make run-mqtt - the MQTT bridge example on embedded brokers.
# make bench  - the throughput/latency benchmark (bench/run.sh): plain pipe
#               (and the synchronous plain loop), GroupTransactSession loop, the runner and Kafka Streams
#               (exactly_once_v2, built with Maven) on Apache Kafka, and the
#               first three on the embedded broker. BENCH_RECORDS=300000
#               scales it down.
# make bench-recovery - the recovery benchmarks on Apache Kafka
#               (bench/recovery.sh): warm and cold restart after SIGKILL,
#               failover with and without a standby, the pause of unmoved
#               tasks when an instance joins or leaves.
#
# The repository holds six modules, tied together by go.work: the library
# (the root) and bench, examples, integration, internal/pgtest and
# schemaregistry, which keep their dependencies (toxiproxy, pgx, Avro,
# ...) out of the library's go.mod. `go test ./...` at the root covers
# the library only; the targets below pass every module's packages
# (scripts/packages.sh) to one go command.
GO ?= go

.PHONY: test test-embedded test-kafka test-cluster test-secure run bench bench-recovery chaos-long chaos-long-cluster check-mod check-api test-secrets

test: check-mod check-api test-embedded test-alerts test-kafka test-cluster test-secure test-postgres test-secrets test-mosquitto test-schemaregistry fuzz

# The alert rules checked and unit-tested by promtool (installed from
# Debian's packages when missing).
.PHONY: test-alerts
test-alerts:
	GO=$(GO) bash scripts/promtool.sh

# Every module's go.mod and go.sum are tidy, so the library's go.mod lists
# only what the library's packages import.
check-mod:
	pkgs=$$(GO=$(GO) bash scripts/packages.sh) && \
	for p in $$pkgs; do \
		m=$${p%/...}; \
		(cd "$$m" && GOWORK=off $(GO) mod tidy -diff) || { echo "check-mod: go mod tidy in $$m" >&2; exit 1; }; \
	done

# No exported identifier of a public package takes, returns or holds an
# internal type: go doc -all of every package outside internal/ names no
# identifier of an internal package (public_api_test.go; test-embedded
# runs it too).
check-api:
	$(GO) test -count=1 -run '^TestPublicAPINamesNoInternalType$$' .

test-embedded:
	pkgs=$$(GO=$(GO) bash scripts/packages.sh) && \
	$(GO) vet $$pkgs && \
	$(GO) test -race -count=1 $$pkgs

test-kafka:
	bash integration/kafka/test-kafka.sh

test-cluster:
	bash integration/kafka/test-cluster.sh

# Every go test -fuzz target for a short bounded time (FUZZTIME=5s).
.PHONY: fuzz
fuzz:
	GO=$(GO) bash scripts/fuzz.sh

test-secure:
	GO=$(GO) bash integration/kafka/secure.sh test -race -count=1 -v -timeout 15m -run 'TestSecure' ./integration/

test-secrets:
	GO=$(GO) bash integration/secrets/interop.sh

run:
	$(GO) run ./examples/wordcount

bench:
	GO=$(GO) bash bench/run.sh

bench-recovery:
	GO=$(GO) bash bench/recovery.sh

# One long chaos run against Apache Kafka (transaction version 2).
chaos-long:
	KAFKA_TEST_VERSIONS=2 CHAOS_RECORDS=1000000 GOTEST_FLAGS= bash integration/kafka/test-kafka.sh

# One long cluster chaos run (1M records, more faults of every kind).
chaos-long-cluster:
	CLUSTER_CHAOS_RECORDS=1000000 CHAOS_KILLS=40 CHAOS_ZOMBIES=4 CHAOS_STOPS=4 \
	CHAOS_BROKER_KILLS=12 CHAOS_BROKER_FREEZES=4 CHAOS_ELECTIONS=6 bash integration/kafka/test-cluster.sh
# The PostgreSQL tests (the sink example's kill test) with a throw-away
# server started by integration/postgres/test-postgres.sh.
.PHONY: test-postgres
test-postgres:
	GO=$(GO) PG_TEST_PACKAGES="./examples/pgsink ./internal/pgtest" bash integration/postgres/test-postgres.sh
# The MQTT bridge tests (mqttbridge, the example) against a throw-away
# Mosquitto 2 broker (apt package mosquitto) started by
# integration/mqtt/test-mosquitto.sh and selected by MQTT_BROKER; Kafka
# stays the embedded broker.
.PHONY: test-mosquitto run-mqtt
test-mosquitto:
	GO=$(GO) bash integration/mqtt/test-mosquitto.sh

# The MQTT bridge benchmark: this project's bridge against the Python
# library's (flechtwerk 0.17.0) on one Apache Kafka and one Mosquitto 2
# (bench/mqtt/run.sh).
.PHONY: bench-mqtt
bench-mqtt:
	GO=$(GO) bash bench/mqtt/run.sh

# The MQTT bridge example on embedded brokers (kfake and mochi-mqtt).
run-mqtt:
	$(GO) run ./examples/mqttbridge
# The schemaregistry module's tests against a throw-away Apicurio Registry
# (in-memory storage, /apis/ccompat/v7) selected by SCHEMA_REGISTRY_URL;
# make test-embedded runs the same tests on franz-go's in-process fake.
.PHONY: test-schemaregistry
test-schemaregistry:
	GO=$(GO) bash integration/schemaregistry/test-schemaregistry.sh
