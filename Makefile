# make test   - everything: vet, the suite on the embedded broker (race
#               detector), then the suite against real Apache Kafka 4.x
#               (transaction versions 2 and 1) fetched from Maven Central.
# make run    - the word-count example on an embedded broker.
# make bench  - benchmarks (stateful exactly-once vs. a plain loop).
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
	$(GO) test ./bench -run '^$$' -bench . -benchmem -benchtime 200000x

# One long chaos run against Apache Kafka (transaction version 2).
chaos-long:
	KAFKA_TEST_VERSIONS=2 CHAOS_RECORDS=1000000 GOTEST_FLAGS= bash integration/kafka/test-kafka.sh
