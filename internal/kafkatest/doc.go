// Package kafkatest gives tests a broker and helpers around it.
//
// With KAFKA_BROKERS set (a comma-separated list) tests run against that
// cluster, e.g. real Apache Kafka started by `make test`; without it each
// test starts an embedded kfake cluster on 127.0.0.1. Every test uses its
// own topic names (Name), so tests never interfere on a shared cluster.
//
// On the embedded broker, TraceTransactions records the transactional
// requests it handles (producer id, epoch and sequence of every produce
// batch) and logs them if the test fails.
package kafkatest
