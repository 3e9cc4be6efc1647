// Package integration holds the end-to-end tests of the exactly-once
// runtime. They run on an embedded kfake broker under `go test ./...`, and
// against a real cluster when KAFKA_BROKERS is set (as `make test` does with
// Apache Kafka).
package integration
