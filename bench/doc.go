// Package bench measures Flechtwerk's throughput and latency against what a
// Go user could write without it, in the same run on the same broker.
//
// Command eosbench (bench/cmd/eosbench) is the benchmark; `make bench`
// (bench/run.sh) builds it, starts a single-node Apache Kafka broker, runs
// it there and again on the embedded broker (kfake). Every row drains the
// same 12-partition input with a stateful per-key counter that emits two
// outputs per input:
//
//   - (a) a plain franz-go consume→produce pipe, at least once, pipelined
//     (asynchronous produce; each poll's offsets committed asynchronously
//     once its outputs are acknowledged): the limit;
//   - (a-sync) the same loop waiting for its outputs and its offset commit
//     after every poll (-sync-loop), an extra row for reference;
//   - (b) a hand-rolled kgo.GroupTransactSession loop with its changelog in
//     the same transaction: what a user writes without this library;
//   - (c) the runner at CommitInterval 100ms (the default), 10ms and 1s
//     (-intervals);
//   - (d) the same counter as a Kafka Streams application under
//     exactly_once_v2 (bench/streams, built with Maven).
//
// A drain row counts the committed outputs afterwards and fails unless
// they are exactly two per input. Latency rows offer a paced load and
// measure input produced → output visible to a read_committed reader, with
// the CPU of the process, the broker and the machine; the runner's rows
// break the latency down by stage. Ratios hold within one run only.
//
// docs/performance.md has the workload in full, the latest figures and how
// to reproduce them; eosbench -help lists the flags.
//
// This package's own go test benchmarks (BenchmarkCounter on kfake or
// KAFKA_BROKERS, BenchmarkTransformerProcess, BenchmarkTransformerTwoOutputs,
// BenchmarkDriver) run with
//
//	go test ./bench -run '^$' -bench . -benchtime 200000x
//
// BenchmarkPipeline compares a two-stage pipeline (re-key into a
// repartition topic, then count) in one process against the same two
// stages as two processes, in one run (x-one-process: the rate of two
// processes over that of one); its stages run in child processes of the
// test binary.
//
// Without -bench, go test only compiles the package.
package bench
